// Package pki owns kubeboot's public key infrastructure: the table of
// certificates a control-plane node needs, in kubeadm's layout, issuing them
// (crypto/x509, with cfssl's keys and profiles), the kubeconfig files, and the checks that decide whether what
// already exists can be reused. It is pure: it never touches the disk and
// never prints; callers pass file contents in and write the returned bytes.
package pki

import (
	"io/fs"
	"net"
	"path"
	"slices"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
)

// Usage is what a certificate is for. Except for UsageCA, it also names the
// profile that issues the certificate: its extended key usages.
type Usage string

// The certificate usages.
const (
	UsageCA     Usage = "ca"
	UsageServer Usage = "server"
	UsageClient Usage = "client"
	// UsagePeer is both server and client, as etcd members are to each other.
	UsagePeer Usage = "peer"
)

// Identities that RBAC bindings refer to; bootstrap-admin binds them.
const (
	// AdminsGroup is the organization of admin.conf's client certificate.
	AdminsGroup = "kubeadm:cluster-admins"
	// KubeletClientUser is the CN of the API server's kubelet client certificate.
	KubeletClientUser = "kube-apiserver-kubelet-client"
	// CSRApproverUser is the CN of csr-approver.conf's client certificate,
	// which the csr-approver phase grants the approving of kubelet serving
	// certificates and nothing else.
	CSRApproverUser = "kubeboot:csr-approver"
	// CSRApproverGroup is its organization, a group of its own, so that it
	// inherits no other grant.
	CSRApproverGroup = "kubeboot:csr-approvers"
)

// Kubelet names the kubelet in Restart lists. It is a host service rather
// than a static pod, so config does not list it among the components.
const Kubelet = "kubelet"

// File modes the caller must use when writing the material of this package.
const (
	ModeDir        fs.FileMode = 0o700 // the certificates directory and etcd/ under it
	ModeKey        fs.FileMode = 0o600 // private keys, including sa.key
	ModeCert       fs.FileMode = 0o644 // certificates and sa.pub
	ModeKubeconfig fs.FileMode = 0o600 // kubeconfigs embed private keys
)

// CertSpec is one certificate of the node, resolved for a configuration.
type CertSpec struct {
	// Name is the file base name relative to the certificates directory,
	// one of the config.Cert* constants; for the client certificate of a
	// kubeconfig it is the kubeconfig's file name.
	Name  string
	CN    string
	Org   []string
	Usage Usage
	// CA is the Name of the issuing CA; empty for a CA.
	CA  string
	DNS []string
	IPs []net.IP
	// Algorithm and Validity apply when the certificate is issued.
	Algorithm config.KeyAlgorithm
	Validity  time.Duration
	// Restart lists the components that read the certificate only at
	// start-up, so they must restart after it is renewed.
	Restart []string
}

// File is the certificate's file name as messages name it: relative to
// the certificates directory, or the kubeconfig file that embeds it.
func (s CertSpec) File() string {
	if s.isKubeconfigClient() {
		return s.Name
	}
	return s.Name + ".crt"
}

// KeyFile is the private key's file name as messages name it.
func (s CertSpec) KeyFile() string {
	if s.isKubeconfigClient() {
		return s.Name
	}
	return s.Name + ".key"
}

// isKubeconfigClient tells a certificate embedded in a kubeconfig apart:
// it is named after the kubeconfig file, which has an extension, while
// certificate base names have none.
func (s CertSpec) isKubeconfigClient() bool {
	return path.Ext(s.Name) != ""
}

// KubeconfigSpec is one kubeconfig file of the node.
type KubeconfigSpec struct {
	// Name is the file name in the kubeconfig directory, one of the
	// config.Kubeconfig* constants.
	Name string
	// Cluster is the cluster's name in the file.
	Cluster string
	// Server is the API server URL.
	Server string
	// Client is the embedded client certificate; its CN is the user name.
	Client CertSpec
	// SharedKey names the certificate whose key the client certificate
	// certifies when the kubeconfig is created: the component's serving
	// certificate. One key pair per component identity spares two RSA key
	// generations, which dominate the time of an init.
	SharedKey string
	// KubeletRotates marks kubelet.conf: the kubelet rotates its client
	// certificate, so the file may name the kubelet's own pair
	// (KubeletClientFile) instead of embedding kubeboot's, as it does once
	// kubelet-finalize has run.
	KubeletRotates bool
}

// Context is the name of the file's only context, user@cluster as kubeadm
// names it.
func (k KubeconfigSpec) Context() string {
	return k.Client.CN + "@" + k.Cluster
}

// CertSpecs returns every certificate of the node for a defaulted
// configuration, each CA before the certificates it issues. With an
// external etcd, the etcd CA and the etcd certificates are left out.
func CertSpecs(cfg *config.ClusterConfiguration) []CertSpec {
	ca := func(name, cn string) CertSpec {
		return CertSpec{Name: name, CN: cn, Usage: UsageCA,
			Algorithm: cfg.Certificates.KeyAlgorithm, Validity: cfg.Certificates.CAValidity.Duration}
	}
	leaf := func(name, cn string, usage Usage, ca string, restart ...string) CertSpec {
		return CertSpec{Name: name, CN: cn, Usage: usage, CA: ca, Restart: restart,
			Algorithm: cfg.Certificates.KeyAlgorithm, Validity: cfg.Certificates.LeafValidity.Duration}
	}
	node := cfg.Node.Name
	advertise := net.ParseIP(cfg.Node.AdvertiseAddress)
	loopback := []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback}

	apiServer := leaf(config.CertAPIServer, "kube-apiserver", UsageServer, config.CertCA, config.NameAPIServer)
	apiServer.DNS, apiServer.IPs = apiServerSANs(cfg, advertise)

	controllerManager := leaf(config.CertControllerManager, "kube-controller-manager", UsageServer, config.CertCA, config.NameControllerManager)
	scheduler := leaf(config.CertScheduler, "kube-scheduler", UsageServer, config.CertCA, config.NameScheduler)
	for _, s := range []*CertSpec{&controllerManager, &scheduler} {
		s.DNS = []string{"localhost", node}
		// Both loopbacks: on an IPv6 node the components bind ::1.
		s.IPs = uniqueIPs(loopback[0], loopback[1], advertise)
	}

	specs := []CertSpec{
		ca(config.CertCA, "kubernetes"),
		apiServer,
		leaf(config.CertAPIServerKubeletClient, KubeletClientUser, UsageClient, config.CertCA, config.NameAPIServer),
		ca(config.CertFrontProxyCA, "front-proxy-ca"),
		leaf(config.CertFrontProxyClient, "front-proxy-client", UsageClient, config.CertFrontProxyCA, config.NameAPIServer),
	}
	if local := cfg.Etcd.Local; cfg.Etcd.External == nil && local != nil {
		server := leaf(config.CertEtcdServer, node, UsagePeer, config.CertEtcdCA, config.NameEtcd)
		peer := leaf(config.CertEtcdPeer, node, UsagePeer, config.CertEtcdCA, config.NameEtcd)
		for _, s := range []struct {
			spec  *CertSpec
			extra []string
		}{{&server, local.ServerCertSANs}, {&peer, local.PeerCertSANs}} {
			dns, ips := splitSANs(s.extra)
			s.spec.DNS = uniqueStrings(append([]string{node, "localhost"}, dns...)...)
			s.spec.IPs = uniqueIPs(append([]net.IP{advertise, loopback[0], loopback[1]}, ips...)...)
		}
		specs = append(specs,
			ca(config.CertEtcdCA, "etcd-ca"),
			server,
			peer,
			// The health checks use this identity; no component loads it.
			leaf(config.CertEtcdHealthcheckClient, "kube-etcd-healthcheck-client", UsageClient, config.CertEtcdCA),
			leaf(config.CertAPIServerEtcdClient, "kube-apiserver-etcd-client", UsageClient, config.CertEtcdCA, config.NameAPIServer),
		)
	}
	specs = append(specs, controllerManager, scheduler)
	if config.On(cfg.Security.VerifyKubeletServingCerts) {
		// The identity serverTLSBootstrap would request, so that the
		// certificate looks the same however a kubelet got it; the API
		// server dials the node's InternalIP, which is the advertise address.
		kubelet := leaf(config.CertKubeletServer, "system:node:"+node, UsageServer, config.CertCA, Kubelet)
		kubelet.Org = []string{"system:nodes"}
		kubelet.DNS, kubelet.IPs = []string{node}, uniqueIPs(advertise)
		specs = append(specs, kubelet)
	}
	return specs
}

// apiServerSANs lists every name under which clients reach the API server:
// the in-cluster Service names and first Service IPs, the node, the
// controlPlaneEndpoint and the user's extra SANs.
func apiServerSANs(cfg *config.ClusterConfiguration, advertise net.IP) ([]string, []net.IP) {
	svc := "kubernetes.default.svc"
	dns := []string{cfg.Node.Name, "kubernetes", "kubernetes.default", svc, svc + "." + cfg.Networking.DNSDomain}
	var ips []net.IP
	for _, subnet := range cfg.ServiceSubnets() {
		ips = append(ips, firstIP(subnet))
	}
	ips = append(ips, advertise)
	if cfg.ControlPlaneEndpoint != "" {
		host, _ := cfg.ControlPlaneHostPort()
		d, i := splitSANs([]string{host})
		dns, ips = append(dns, d...), append(ips, i...)
	}
	d, i := splitSANs(cfg.APIServer.CertSANs)
	return uniqueStrings(append(dns, d...)...), uniqueIPs(append(ips, i...)...)
}

// KubeconfigSpecs returns the node's kubeconfig files. The node-local
// components talk to their own API server; the others go through the
// controlPlaneEndpoint.
func KubeconfigSpecs(cfg *config.ClusterConfiguration) []KubeconfigSpec {
	kubeconfig := func(name, server, cn, org string, shared string, restart ...string) KubeconfigSpec {
		client := CertSpec{Name: name, CN: cn, Usage: UsageClient, CA: config.CertCA, Restart: restart,
			Algorithm: cfg.Certificates.KeyAlgorithm, Validity: cfg.Certificates.LeafValidity.Duration}
		if org != "" {
			client.Org = []string{org}
		}
		return KubeconfigSpec{Name: name, Cluster: cfg.ClusterName, Server: server, Client: client, SharedKey: shared}
	}
	remote, local := cfg.ControlPlaneURL(), cfg.LocalAPIEndpoint()
	// Like the controller-manager and scheduler, the kubelet's client and
	// serving certificates share one key: one identity, one fewer key to
	// generate (RSA keys dominate the time of a render).
	kubeletKey := ""
	if config.On(cfg.Security.VerifyKubeletServingCerts) {
		kubeletKey = config.CertKubeletServer
	}
	kubelet := kubeconfig(config.KubeconfigKubelet, remote, "system:node:"+cfg.Node.Name, "system:nodes", kubeletKey, Kubelet)
	kubelet.KubeletRotates = true
	specs := []KubeconfigSpec{
		kubeconfig(config.KubeconfigAdmin, remote, "kubernetes-admin", AdminsGroup, ""),
		kubeconfig(config.KubeconfigSuperAdmin, remote, "kubernetes-super-admin", "system:masters", ""),
		kubelet,
		kubeconfig(config.KubeconfigControllerManager, local, "system:kube-controller-manager", "", config.CertControllerManager, config.NameControllerManager),
		kubeconfig(config.KubeconfigScheduler, local, "system:kube-scheduler", "", config.CertScheduler, config.NameScheduler),
	}
	if cfg.CSRApproverEnabled() {
		// Like the controller manager, the approver talks to its own node's
		// API server. It is no component of Restarts: the renewal restarts
		// its static pod itself (controlplane's restartCSRApprover).
		specs = append(specs, kubeconfig(config.KubeconfigCSRApprover, local, CSRApproverUser, CSRApproverGroup, ""))
	}
	return specs
}

// Restarts returns the components that must restart to load the named
// certificates and kubeconfigs, in start order, the kubelet last.
func Restarts(cfg *config.ClusterConfiguration, names []string) []string {
	need := map[string]bool{}
	for _, s := range allClientSpecs(cfg) {
		if slices.Contains(names, s.Name) {
			for _, r := range s.Restart {
				need[r] = true
			}
		}
	}
	var out []string
	for _, c := range append(config.ComponentNames, Kubelet) {
		if need[c] {
			out = append(out, c)
		}
	}
	return out
}

// Loads returns, for each component that must restart to load a
// certificate or kubeconfig (see Restarts), the node paths of those files.
func Loads(cfg *config.ClusterConfiguration) map[string][]string {
	loads := map[string][]string{}
	add := func(path string, components []string) {
		for _, c := range components {
			loads[c] = append(loads[c], path)
		}
	}
	for _, s := range CertSpecs(cfg) {
		add(cfg.CertPath(s.Name), s.Restart)
	}
	for _, k := range KubeconfigSpecs(cfg) {
		add(cfg.KubeconfigPath(k.Name), k.Client.Restart)
	}
	return loads
}

// allClientSpecs returns the certificate specs and the client certificate
// specs of the kubeconfigs in one list.
func allClientSpecs(cfg *config.ClusterConfiguration) []CertSpec {
	specs := CertSpecs(cfg)
	for _, k := range KubeconfigSpecs(cfg) {
		specs = append(specs, k.Client)
	}
	return specs
}

// firstIP is the first host address of a subnet, which Kubernetes gives to
// the "kubernetes" Service.
func firstIP(subnet *net.IPNet) net.IP {
	ip := make(net.IP, len(subnet.IP))
	copy(ip, subnet.IP.Mask(subnet.Mask))
	for i := len(ip) - 1; i >= 0; i-- {
		ip[i]++
		if ip[i] != 0 {
			break
		}
	}
	return ip
}

// splitSANs sorts SAN entries into IP addresses and DNS names. Whatever is
// not an IP counts as a DNS name; issuing rejects the invalid ones.
func splitSANs(entries []string) (dns []string, ips []net.IP) {
	for _, e := range entries {
		if ip := net.ParseIP(e); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, e)
		}
	}
	return dns, ips
}

func uniqueStrings(in ...string) []string {
	var out []string
	for _, s := range in {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// uniqueIPs drops nil and repeated addresses, comparing IPv4 addresses in
// either of their two encodings as equal.
func uniqueIPs(in ...net.IP) []net.IP {
	var out []net.IP
	for _, ip := range in {
		if ip == nil || containsIP(out, ip) {
			continue
		}
		if v4 := ip.To4(); v4 != nil {
			ip = v4
		}
		out = append(out, ip)
	}
	return out
}

func containsIP(list []net.IP, ip net.IP) bool {
	return slices.ContainsFunc(list, ip.Equal)
}
