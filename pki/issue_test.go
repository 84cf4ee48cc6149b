package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"fmt"
	"log"
	"math/big"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubeboot/kubeboot/internal/config"
)

// ensureAll creates a node's whole PKI from nothing.
func ensureAll(t *testing.T, cfg *config.ClusterConfiguration) Set {
	t.Helper()
	set, err := Ensure(cfg, Set{}, time.Now(), nil)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	return set
}

func mustParseCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	cert, err := parseCert(data)
	if err != nil {
		t.Fatalf("parse certificate: %v", err)
	}
	return cert
}

// keyName describes a public key the way config names key algorithms.
func keyName(pub crypto.PublicKey) string {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		return fmt.Sprintf("rsa-%d", k.N.BitLen())
	case *ecdsa.PublicKey:
		return fmt.Sprintf("ecdsa-p%d", k.Curve.Params().BitSize)
	}
	return fmt.Sprintf("%T", pub)
}

func ipStrings(cert *x509.Certificate) []string {
	var out []string
	for _, ip := range cert.IPAddresses {
		out = append(out, ip.String())
	}
	return out
}

// verifyCert checks a freshly issued certificate against its spec with
// crypto/x509 alone, independently of Check.
func verifyCert(t *testing.T, spec CertSpec, pair KeyPair, caPEM []byte, issued time.Time) *x509.Certificate {
	t.Helper()
	cert := mustParseCert(t, pair.Cert)
	key, err := parseKey(pair.Key)
	if err != nil {
		t.Fatalf("%s: %v", spec.Name, err)
	}
	if !publicKeysEqual(key.Public(), cert.PublicKey) {
		t.Errorf("%s: key does not match certificate", spec.Name)
	}
	if got := keyName(cert.PublicKey); got != string(spec.Algorithm) {
		t.Errorf("%s: key %s, want %s", spec.Name, got, spec.Algorithm)
	}
	if cert.Subject.CommonName != spec.CN || !slices.Equal(cert.Subject.Organization, spec.Org) {
		t.Errorf("%s: subject CN=%q O=%q, want CN=%q O=%q", spec.Name, cert.Subject.CommonName, cert.Subject.Organization, spec.CN, spec.Org)
	}
	if got := cert.NotAfter.Sub(cert.NotBefore); got != spec.Validity {
		t.Errorf("%s: valid for %v, want %v", spec.Name, got, spec.Validity)
	}
	if age := issued.Sub(cert.NotBefore); age < 4*time.Minute || age > 6*time.Minute {
		t.Errorf("%s: NotBefore %v is %v before issuing, want about 5m", spec.Name, cert.NotBefore, age)
	}
	if cert.SerialNumber.Cmp(new(big.Int).Lsh(big.NewInt(1), 64)) < 0 {
		t.Errorf("%s: serial %v is not a large random number", spec.Name, cert.SerialNumber)
	}

	if spec.Usage == UsageCA {
		if !cert.IsCA || !cert.BasicConstraintsValid || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
			t.Errorf("%s: IsCA=%v, key usage %b; want a CA that signs certificates", spec.Name, cert.IsCA, cert.KeyUsage)
		}
		if err := cert.CheckSignatureFrom(cert); err != nil {
			t.Errorf("%s: not self-signed: %v", spec.Name, err)
		}
		return cert
	}

	if cert.IsCA {
		t.Errorf("%s: IsCA, want a leaf", spec.Name)
	}
	if want := x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment; cert.KeyUsage != want {
		t.Errorf("%s: key usage %b, want %b", spec.Name, cert.KeyUsage, want)
	}
	if diff := cmp.Diff(extKeyUsages(spec.Usage), cert.ExtKeyUsage); diff != "" {
		t.Errorf("%s: extended key usages (-want +got):\n%s", spec.Name, diff)
	}
	if diff := cmp.Diff(spec.DNS, cert.DNSNames); diff != "" {
		t.Errorf("%s: DNS SANs (-want +got):\n%s", spec.Name, diff)
	}
	var wantIPs []string
	for _, ip := range spec.IPs {
		wantIPs = append(wantIPs, ip.String())
	}
	if diff := cmp.Diff(wantIPs, ipStrings(cert)); diff != "" {
		t.Errorf("%s: IP SANs (-want +got):\n%s", spec.Name, diff)
	}
	roots := x509.NewCertPool()
	roots.AddCert(mustParseCert(t, caPEM))
	for _, eku := range extKeyUsages(spec.Usage) {
		opts := x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{eku}, CurrentTime: issued}
		if _, err := cert.Verify(opts); err != nil {
			t.Errorf("%s: verify for %s: %v", spec.Name, extKeyUsageNames[eku], err)
		}
	}
	for _, host := range append(slices.Clone(spec.DNS), wantIPs...) {
		if err := cert.VerifyHostname(host); err != nil {
			t.Errorf("%s: %v", spec.Name, err)
		}
	}
	return cert
}

// verifySet checks every file a fresh Ensure returned.
func verifySet(t *testing.T, cfg *config.ClusterConfiguration, set Set, issued time.Time) {
	t.Helper()
	var want, got []string
	for _, s := range CertSpecs(cfg) {
		want = append(want, s.Name)
	}
	for name := range set.Certs {
		got = append(got, name)
	}
	if diff := cmp.Diff(want, got, cmp.Transformer("sort", func(s []string) []string { return slices.Sorted(slices.Values(s)) })); diff != "" {
		t.Errorf("certificates (-want +got):\n%s", diff)
	}
	serials := map[string]string{}
	for _, s := range CertSpecs(cfg) {
		cert := verifyCert(t, s, set.Certs[s.Name], set.Certs[s.CA].Cert, issued)
		if other, ok := serials[cert.SerialNumber.String()]; ok {
			t.Errorf("%s and %s share serial %v", s.Name, other, cert.SerialNumber)
		}
		serials[cert.SerialNumber.String()] = s.Name
	}
	if err := CheckServiceAccountKey(set.ServiceAccount); err != nil {
		t.Errorf("service-account key: %v", err)
	}
	for _, k := range KubeconfigSpecs(cfg) {
		verifyKubeconfig(t, k, set.Kubeconfigs[k.Name], set.Certs[config.CertCA].Cert, issued)
	}
}

func verifyKubeconfig(t *testing.T, spec KubeconfigSpec, data, caPEM []byte, issued time.Time) {
	t.Helper()
	c, err := clientcmd.Load(data)
	if err != nil {
		t.Fatalf("%s: %v", spec.Name, err)
	}
	ctx := c.Contexts[c.CurrentContext]
	if c.CurrentContext != spec.Context() || ctx == nil || ctx.Cluster != spec.Cluster || ctx.AuthInfo != spec.Client.CN {
		t.Fatalf("%s: current context %q = %+v, want %q for user %q in cluster %q", spec.Name, c.CurrentContext, ctx, spec.Context(), spec.Client.CN, spec.Cluster)
	}
	cluster, user := c.Clusters[ctx.Cluster], c.AuthInfos[ctx.AuthInfo]
	if cluster.Server != spec.Server {
		t.Errorf("%s: server %q, want %q", spec.Name, cluster.Server, spec.Server)
	}
	if string(cluster.CertificateAuthorityData) != string(caPEM) {
		t.Errorf("%s: embedded CA differs from ca.crt", spec.Name)
	}
	verifyCert(t, spec.Client, KeyPair{Cert: user.ClientCertificateData, Key: user.ClientKeyData}, caPEM, issued)
}

func TestEnsureCreatesEverything(t *testing.T) {
	for name, mutate := range map[string]func(*config.ClusterConfiguration){
		"defaults": nil,
		"dual-stack behind a load balancer": func(c *config.ClusterConfiguration) {
			c.Networking.ServiceSubnet = "10.96.0.0/12,fd00:10:96::/112"
			c.ControlPlaneEndpoint = "lb.example.com:443"
			c.APIServer.CertSANs = []string{"192.168.1.10", "*.example.com"}
			c.Etcd.Local = &config.LocalEtcd{ServerCertSANs: []string{"etcd.example.com", "fd00::9"}}
		},
		"external etcd, RSA": func(c *config.ClusterConfiguration) {
			c.Etcd.External = &config.ExternalEtcd{Endpoints: []string{"https://etcd:2379"}}
			c.Certificates.KeyAlgorithm = config.RSA2048
		},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(t, mutate)
			issued := time.Now()
			verifySet(t, cfg, ensureAll(t, cfg), issued)
		})
	}
}

// TestKeyAlgorithms issues a CA, a leaf and the service-account key with
// every algorithm.
func TestKeyAlgorithms(t *testing.T) {
	wantSig := map[config.KeyAlgorithm]x509.SignatureAlgorithm{
		config.ECDSAP256: x509.ECDSAWithSHA256,
		config.ECDSAP384: x509.ECDSAWithSHA384,
		config.RSA2048:   x509.SHA256WithRSA,
		config.RSA3072:   x509.SHA384WithRSA,
		config.RSA4096:   x509.SHA512WithRSA,
	}
	for _, alg := range config.KeyAlgorithms {
		t.Run(string(alg), func(t *testing.T) {
			cfg := testConfig(t, func(c *config.ClusterConfiguration) { c.Certificates.KeyAlgorithm = alg })
			set, err := Ensure(cfg, Set{}, time.Now(), []string{config.CertCA, config.CertAPIServer, config.KeyServiceAccount})
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{config.CertCA, config.CertAPIServer} {
				cert := mustParseCert(t, set.Certs[name].Cert)
				if got := keyName(cert.PublicKey); got != string(alg) {
					t.Errorf("%s key: %s, want %s", name, got, alg)
				}
				if cert.SignatureAlgorithm != wantSig[alg] {
					t.Errorf("%s signature: %v, want %v", name, cert.SignatureAlgorithm, wantSig[alg])
				}
			}
			sa, err := parseKey(set.ServiceAccount.Private)
			if err != nil {
				t.Fatal(err)
			}
			if got := keyName(sa.Public()); got != string(alg) {
				t.Errorf("sa.key: %s, want %s", got, alg)
			}
		})
	}
}

func TestIssueErrors(t *testing.T) {
	cfg := testConfig(t, nil)
	ca, err := NewCA(CertSpecs(cfg)[0])
	if err != nil {
		t.Fatal(err)
	}
	apiServer := CertSpecs(cfg)[1]
	tests := []struct {
		name   string
		mutate func(*CertSpec)
		ca     KeyPair
		want   string
	}{
		{"bad DNS SAN", func(s *CertSpec) { s.DNS = append(s.DNS, "not a name") }, ca,
			`issue certificate "apiserver": invalid DNS SAN "not a name": a lowercase RFC 1123 subdomain`},
		{"e-mail as DNS SAN", func(s *CertSpec) { s.DNS = []string{"root@example.com"} }, ca,
			`issue certificate "apiserver": invalid DNS SAN "root@example.com"`},
		{"bad IP SAN", func(s *CertSpec) { s.IPs = append(s.IPs, []byte{10, 0, 0}) }, ca,
			`issue certificate "apiserver": invalid IP SAN "?0a0000"`},
		{"unknown algorithm", func(s *CertSpec) { s.Algorithm = "dsa-1024" }, ca,
			`issue certificate "apiserver": unsupported key algorithm "dsa-1024"`},
		{"unknown usage", func(s *CertSpec) { s.Usage = "code signing" }, ca,
			`issue certificate "apiserver": unknown usage "code signing"`},
		{"a CA", func(s *CertSpec) { s.Usage = UsageCA }, ca, `issue certificate "apiserver": a CA is created with NewCA`},
		{"external CA", func(*CertSpec) {}, KeyPair{Cert: ca.Cert}, `issue certificate "apiserver": ca.key is absent (external CA)`},
		{"CA key mismatch", func(*CertSpec) {}, KeyPair{Cert: ca.Cert, Key: mustNewKey(t).pem}, `issue certificate "apiserver": CA "ca": key does not match certificate`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := apiServer
			tt.mutate(&spec)
			_, err := Issue(spec, tt.ca, nil)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("Issue error = %v, want prefix %q", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), `"code"`) {
				t.Errorf("Issue error %q is cfssl's JSON", err)
			}
		})
	}
}

func mustNewKey(t *testing.T) privateKey {
	t.Helper()
	key, err := newKey(config.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// TestIssueCapsAtCAExpiry keeps a leaf from outliving a short-lived CA.
func TestIssueCapsAtCAExpiry(t *testing.T) {
	specs := CertSpecs(testConfig(t, nil))
	caSpec := specs[0]
	caSpec.Validity = 24 * time.Hour
	ca, err := NewCA(caSpec)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := Issue(specs[1], ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := mustParseCert(t, leaf.Cert).NotAfter, mustParseCert(t, ca.Cert).NotAfter; !got.Equal(want) {
		t.Errorf("leaf expires %v, want the CA's expiry %v", got, want)
	}
}

// TestIssuingPrintsNothing: cfssl logs every certificate it signs through
// the standard logger unless pki silences it; pki never prints.
func TestIssuingPrintsNothing(t *testing.T) {
	var logged bytes.Buffer
	log.SetOutput(&logged)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	ca, err := NewCA(CertSpec{Name: "ca", CN: "kubernetes", Usage: UsageCA, Algorithm: config.ECDSAP256, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Issue(CertSpec{Name: "leaf", CN: "leaf", CA: "ca", Usage: UsageClient, Algorithm: config.ECDSAP256, Validity: time.Hour}, ca, nil); err != nil {
		t.Fatal(err)
	}
	if logged.Len() > 0 {
		t.Errorf("issuing printed %q", logged.String())
	}
}
