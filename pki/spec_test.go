package pki

import (
	"crypto/x509"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubeboot/kubeboot/internal/config"
)

// row is the part of a CertSpec that the table in the design fixes.
type row struct {
	Name, CN, CA string
	Org          []string
	Usage        Usage
	DNS, IPs     []string
	Restart      []string
}

func rows(specs []CertSpec) []row {
	var out []row
	for _, s := range specs {
		r := row{Name: s.Name, CN: s.CN, CA: s.CA, Org: s.Org, Usage: s.Usage, DNS: s.DNS, Restart: s.Restart}
		for _, ip := range s.IPs {
			r.IPs = append(r.IPs, ip.String())
		}
		out = append(out, r)
	}
	return out
}

func TestCertSpecsDefault(t *testing.T) {
	cfg := testConfig(t, nil)
	node := []string{"cp-1", "localhost"}
	local := []string{"10.0.0.5", "127.0.0.1", "::1"}
	want := []row{
		{Name: "ca", CN: "kubernetes", Usage: UsageCA},
		{Name: "apiserver", CN: "kube-apiserver", CA: "ca", Usage: UsageServer,
			DNS: []string{"cp-1", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			IPs: []string{"10.96.0.1", "10.0.0.5"}, Restart: []string{"kube-apiserver"}},
		{Name: "apiserver-kubelet-client", CN: "kube-apiserver-kubelet-client", CA: "ca", Usage: UsageClient, Restart: []string{"kube-apiserver"}},
		{Name: "front-proxy-ca", CN: "front-proxy-ca", Usage: UsageCA},
		{Name: "front-proxy-client", CN: "front-proxy-client", CA: "front-proxy-ca", Usage: UsageClient, Restart: []string{"kube-apiserver"}},
		{Name: "etcd/ca", CN: "etcd-ca", Usage: UsageCA},
		{Name: "etcd/server", CN: "cp-1", CA: "etcd/ca", Usage: UsagePeer, DNS: node, IPs: local, Restart: []string{"etcd"}},
		{Name: "etcd/peer", CN: "cp-1", CA: "etcd/ca", Usage: UsagePeer, DNS: node, IPs: local, Restart: []string{"etcd"}},
		{Name: "etcd/healthcheck-client", CN: "kube-etcd-healthcheck-client", CA: "etcd/ca", Usage: UsageClient},
		{Name: "apiserver-etcd-client", CN: "kube-apiserver-etcd-client", CA: "etcd/ca", Usage: UsageClient, Restart: []string{"kube-apiserver"}},
		{Name: "controller-manager", CN: "kube-controller-manager", CA: "ca", Usage: UsageServer,
			DNS: []string{"localhost", "cp-1"}, IPs: []string{"127.0.0.1", "::1", "10.0.0.5"}, Restart: []string{"kube-controller-manager"}},
		{Name: "scheduler", CN: "kube-scheduler", CA: "ca", Usage: UsageServer,
			DNS: []string{"localhost", "cp-1"}, IPs: []string{"127.0.0.1", "::1", "10.0.0.5"}, Restart: []string{"kube-scheduler"}},
		{Name: "kubelet-server", CN: "system:node:cp-1", Org: []string{"system:nodes"}, CA: "ca", Usage: UsageServer,
			DNS: []string{"cp-1"}, IPs: []string{"10.0.0.5"}, Restart: []string{"kubelet"}},
	}
	specs := CertSpecs(cfg)
	if diff := cmp.Diff(want, rows(specs)); diff != "" {
		t.Errorf("CertSpecs (-want +got):\n%s", diff)
	}
	const year = 365 * 24 * time.Hour
	for _, s := range specs {
		wantValidity := year
		if s.Usage == UsageCA {
			wantValidity = 10 * year
		}
		if s.Validity != wantValidity || s.Algorithm != config.ECDSAP256 {
			t.Errorf("%s: validity %v, algorithm %q; want %v, %q", s.Name, s.Validity, s.Algorithm, wantValidity, config.ECDSAP256)
		}
	}
}

// TestCertSpecsSANs covers what the configuration adds to the SANs.
func TestCertSpecsSANs(t *testing.T) {
	tests := []struct {
		name      string
		mutate    func(*config.ClusterConfiguration)
		spec      string
		wantDNS   []string
		wantIPs   []string
		wantSpecs int
	}{{
		name: "dual-stack services, endpoint host, extra SANs",
		mutate: func(c *config.ClusterConfiguration) {
			c.Networking.ServiceSubnet = "10.96.0.0/12, fd00:10:96::/112"
			c.Networking.DNSDomain = "example.internal"
			c.ControlPlaneEndpoint = "api.example.com:443"
			c.APIServer.CertSANs = []string{"10.0.0.100", "*.api.example.com", "2001:db8::1", "cp-1"}
		},
		spec:      "apiserver",
		wantDNS:   []string{"cp-1", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.example.internal", "api.example.com", "*.api.example.com"},
		wantIPs:   []string{"10.96.0.1", "fd00:10:96::1", "10.0.0.5", "10.0.0.100", "2001:db8::1"},
		wantSpecs: 13,
	}, {
		name:      "endpoint IP without port",
		mutate:    func(c *config.ClusterConfiguration) { c.ControlPlaneEndpoint = "192.168.1.10" },
		spec:      "apiserver",
		wantDNS:   []string{"cp-1", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		wantIPs:   []string{"10.96.0.1", "10.0.0.5", "192.168.1.10"},
		wantSpecs: 13,
	}, {
		name: "IPv6 endpoint equal to the advertise address",
		mutate: func(c *config.ClusterConfiguration) {
			c.Node.AdvertiseAddress = "fd00::5"
			c.ControlPlaneEndpoint = "[fd00::5]:6443"
		},
		spec:      "apiserver",
		wantDNS:   []string{"cp-1", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		wantIPs:   []string{"10.96.0.1", "fd00::5"},
		wantSpecs: 13,
	}, {
		name: "etcd server extra SANs",
		mutate: func(c *config.ClusterConfiguration) {
			c.Etcd.Local = &config.LocalEtcd{ServerCertSANs: []string{"etcd.example.com", "10.1.1.1", "127.0.0.1"}, PeerCertSANs: []string{"peer.example.com"}}
		},
		spec:      "etcd/server",
		wantDNS:   []string{"cp-1", "localhost", "etcd.example.com"},
		wantIPs:   []string{"10.0.0.5", "127.0.0.1", "::1", "10.1.1.1"},
		wantSpecs: 13,
	}, {
		name: "etcd peer extra SANs",
		mutate: func(c *config.ClusterConfiguration) {
			c.Etcd.Local = &config.LocalEtcd{ServerCertSANs: []string{"etcd.example.com"}, PeerCertSANs: []string{"peer.example.com", "fd00::9"}}
		},
		spec:      "etcd/peer",
		wantDNS:   []string{"cp-1", "localhost", "peer.example.com"},
		wantIPs:   []string{"10.0.0.5", "127.0.0.1", "::1", "fd00::9"},
		wantSpecs: 13,
	}, {
		name: "external etcd drops the etcd CA and its leaves",
		mutate: func(c *config.ClusterConfiguration) {
			c.Etcd.External = &config.ExternalEtcd{Endpoints: []string{"https://etcd:2379"}}
		},
		spec:      "apiserver",
		wantDNS:   []string{"cp-1", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		wantIPs:   []string{"10.96.0.1", "10.0.0.5"},
		wantSpecs: 8,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			specs := CertSpecs(testConfig(t, tt.mutate))
			if len(specs) != tt.wantSpecs {
				t.Errorf("got %d specs, want %d", len(specs), tt.wantSpecs)
			}
			for _, r := range rows(specs) {
				if r.Name != tt.spec {
					continue
				}
				if diff := cmp.Diff(tt.wantDNS, r.DNS); diff != "" {
					t.Errorf("DNS SANs (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(tt.wantIPs, r.IPs); diff != "" {
					t.Errorf("IP SANs (-want +got):\n%s", diff)
				}
				return
			}
			t.Errorf("no spec %q", tt.spec)
		})
	}
}

func TestCertSpecsCAsComeFirst(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range CertSpecs(testConfig(t, nil)) {
		if s.Usage != UsageCA && !seen[s.CA] {
			t.Errorf("%s comes before its CA %q", s.Name, s.CA)
		}
		seen[s.Name] = true
	}
}

func TestKubeconfigSpecs(t *testing.T) {
	type kc struct {
		Name, Server, Context, CN, CA, SharedKey string
		Org, Restart                             []string
	}
	get := func(cfg *config.ClusterConfiguration) []kc {
		var out []kc
		for _, k := range KubeconfigSpecs(cfg) {
			out = append(out, kc{k.Name, k.Server, k.Context(), k.Client.CN, k.Client.CA, k.SharedKey, k.Client.Org, k.Client.Restart})
		}
		return out
	}
	cfg := testConfig(t, func(c *config.ClusterConfiguration) {
		c.ClusterName = "lab"
		c.ControlPlaneEndpoint = "api.example.com"
	})
	remote, local := "https://api.example.com:6443", "https://10.0.0.5:6443"
	want := []kc{
		{"admin.conf", remote, "kubernetes-admin@lab", "kubernetes-admin", "ca", "", []string{"kubeadm:cluster-admins"}, nil},
		{"super-admin.conf", remote, "kubernetes-super-admin@lab", "kubernetes-super-admin", "ca", "", []string{"system:masters"}, nil},
		{"kubelet.conf", remote, "system:node:cp-1@lab", "system:node:cp-1", "ca", "kubelet-server", []string{"system:nodes"}, []string{"kubelet"}},
		{"controller-manager.conf", local, "system:kube-controller-manager@lab", "system:kube-controller-manager", "ca", "controller-manager", nil, []string{"kube-controller-manager"}},
		{"scheduler.conf", local, "system:kube-scheduler@lab", "system:kube-scheduler", "ca", "scheduler", nil, []string{"kube-scheduler"}},
		{"csr-approver.conf", local, "kubeboot:csr-approver@lab", "kubeboot:csr-approver", "ca", "", []string{"kubeboot:csr-approvers"}, nil},
	}
	if diff := cmp.Diff(want, get(cfg)); diff != "" {
		t.Errorf("KubeconfigSpecs (-want +got):\n%s", diff)
	}
	for _, k := range KubeconfigSpecs(cfg) {
		if k.Client.File() != k.Name || k.Client.Usage != UsageClient {
			t.Errorf("%s: client file %q, usage %q", k.Name, k.Client.File(), k.Client.Usage)
		}
	}
}

func TestRestarts(t *testing.T) {
	cfg := testConfig(t, nil)
	tests := []struct {
		names []string
		want  []string
	}{
		{[]string{"apiserver"}, []string{"kube-apiserver"}},
		{[]string{"kubelet.conf", "etcd/peer", "scheduler.conf", "front-proxy-client"}, []string{"etcd", "kube-apiserver", "kube-scheduler", "kubelet"}},
		{[]string{"admin.conf", "etcd/healthcheck-client"}, nil},
		{append(CertNames(cfg), KubeconfigNames(cfg)...), []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, Restarts(cfg, tt.names)); diff != "" {
			t.Errorf("Restarts(%q) (-want +got):\n%s", tt.names, diff)
		}
	}
}

func TestFirstIP(t *testing.T) {
	for subnet, want := range map[string]string{
		"10.96.0.0/12":     "10.96.0.1",
		"10.96.0.7/12":     "10.96.0.1",
		"fd00:10:96::/112": "fd00:10:96::1",
		"10.0.0.255/32":    "10.0.1.0",
	} {
		_, n, err := net.ParseCIDR(subnet)
		if err != nil {
			t.Fatal(err)
		}
		if got := firstIP(n).String(); got != want {
			t.Errorf("firstIP(%s) = %s, want %s", subnet, got, want)
		}
	}
}

// TestCSRApproverKubeconfig checks the approver's identity with
// crypto/x509 alone: a client certificate of the cluster CA for user
// kubeboot:csr-approver in a group of its own, good for nothing but client
// auth, talking to this node's API server; and no such file when the
// approver is off.
func TestCSRApproverKubeconfig(t *testing.T) {
	cfg := testConfig(t, func(c *config.ClusterConfiguration) { c.ControlPlaneEndpoint = "api.example.com" })
	set := ensureAll(t, cfg)
	kc, err := clientcmd.Load(set.Kubeconfigs[config.KubeconfigCSRApprover])
	if err != nil {
		t.Fatal(err)
	}
	ctx := kc.Contexts[kc.CurrentContext]
	if server := kc.Clusters[ctx.Cluster].Server; server != "https://10.0.0.5:6443" {
		t.Errorf("server %q, want this node's API server https://10.0.0.5:6443", server)
	}
	user := kc.AuthInfos[ctx.AuthInfo]
	cert := mustParseCert(t, user.ClientCertificateData)
	if cert.Subject.CommonName != "kubeboot:csr-approver" || !slices.Equal(cert.Subject.Organization, []string{"kubeboot:csr-approvers"}) {
		t.Errorf("subject %v, want CN=kubeboot:csr-approver, O=kubeboot:csr-approvers", cert.Subject)
	}
	if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) || cert.IsCA {
		t.Errorf("extended key usages %v, CA %v; want client auth only", cert.ExtKeyUsage, cert.IsCA)
	}
	if len(cert.DNSNames)+len(cert.IPAddresses)+len(cert.EmailAddresses)+len(cert.URIs) > 0 {
		t.Errorf("SANs %v %v %v %v, want none", cert.DNSNames, cert.IPAddresses, cert.EmailAddresses, cert.URIs)
	}
	roots := x509.NewCertPool()
	roots.AddCert(mustParseCert(t, set.Certs[config.CertCA].Cert))
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("verify for client auth against ca.crt: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("verifies for server auth too")
	}
	key, err := parseKey(user.ClientKeyData)
	if err != nil || !publicKeysEqual(key.Public(), cert.PublicKey) {
		t.Errorf("embedded key does not match the certificate: %v", err)
	}

	off := false
	for name, mutate := range map[string]func(*config.ClusterConfiguration){
		"approver off":                     func(c *config.ClusterConfiguration) { c.CSRApprover.Enabled = &off },
		"kubelet serving certs unverified": func(c *config.ClusterConfiguration) { c.Security.VerifyKubeletServingCerts = &off },
	} {
		if names := KubeconfigNames(testConfig(t, mutate)); slices.Contains(names, config.KubeconfigCSRApprover) {
			t.Errorf("%s: kubeconfigs %v include %s", name, names, config.KubeconfigCSRApprover)
		}
	}
}
