package pki

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"regexp"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubeboot/kubeboot/internal/config"
)

// TestCACertHash checks the pin against one computed another way: the
// SubjectPublicKeyInfo re-encoded from the parsed public key, for every
// key algorithm.
func TestCACertHash(t *testing.T) {
	for _, alg := range []config.KeyAlgorithm{config.ECDSAP256, config.RSA2048} {
		t.Run(string(alg), func(t *testing.T) {
			cfg := testConfig(t, func(c *config.ClusterConfiguration) { c.Certificates.KeyAlgorithm = alg })
			ca := mustNewCA(t, CertSpecs(cfg)[0])
			got, err := CACertHash(ca.Cert)
			if err != nil {
				t.Fatal(err)
			}
			block, _ := pem.Decode(ca.Cert)
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			spki, err := x509.MarshalPKIXPublicKey(cert.PublicKey)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(spki)
			if want := "sha256:" + hex.EncodeToString(sum[:]); got != want {
				t.Errorf("CACertHash = %s, want %s", got, want)
			}
			if !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(got) {
				t.Errorf("CACertHash = %q, not sha256:<64 hex digits>", got)
			}
		})
	}
	if _, err := CACertHash([]byte("not a certificate")); err == nil {
		t.Error("a file without a certificate must be an error")
	}
}

func TestClusterInfoKubeconfig(t *testing.T) {
	ca := mustNewCA(t, CertSpecs(testConfig(t, nil))[0])
	data, err := ClusterInfoKubeconfig("https://10.0.0.5:6443", ca.Cert)
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	cluster := c.Clusters[""]
	if len(c.Clusters) != 1 || cluster == nil || cluster.Server != "https://10.0.0.5:6443" || string(cluster.CertificateAuthorityData) != string(ca.Cert) {
		t.Errorf("want one unnamed cluster with the server and the CA, got %+v", c.Clusters)
	}
	if len(c.AuthInfos) != 0 || len(c.Contexts) != 0 || c.CurrentContext != "" {
		t.Errorf("cluster-info must hold no user or context: %+v %+v %q", c.AuthInfos, c.Contexts, c.CurrentContext)
	}
	if strings.Contains(string(data), "PRIVATE KEY") {
		t.Error("cluster-info holds a private key")
	}
}

func TestDiscoveryKubeconfig(t *testing.T) {
	ca := mustNewCA(t, CertSpecs(testConfig(t, nil))[0])
	token := "abcdef.0123456789abcdef"
	data, err := DiscoveryKubeconfig("lab", "https://lb.example:6443", ca.Cert, token)
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := clientcmd.Validate(*c); err != nil {
		t.Fatalf("the discovery kubeconfig does not validate: %v", err)
	}
	rest, err := clientcmd.NewDefaultClientConfig(*c, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if rest.Host != "https://lb.example:6443" || rest.BearerToken != token || string(rest.CAData) != string(ca.Cert) {
		t.Errorf("client config: host %q, token %v, CA %v", rest.Host, rest.BearerToken == token, string(rest.CAData) == string(ca.Cert))
	}
	if c.Contexts[c.CurrentContext].AuthInfo != BootstrapUser {
		t.Errorf("current context %+v", c.Contexts[c.CurrentContext])
	}
}
