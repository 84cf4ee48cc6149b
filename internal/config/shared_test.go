package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSharedHoldsNoSecret: the configuration the cluster keeps holds
// neither the node's registration nor a secret (the certificate key, a
// bootstrap token, the fleet's CA key), and reads back as the same
// configuration for another machine.
func TestSharedHoldsNoSecret(t *testing.T) {
	c := New()
	c.CertificateKey = strings.Repeat("ab", 32)
	c.BootstrapTokens = []BootstrapTokenSpec{{Token: "abcdef.0123456789abcdef"}}
	c.Certificates.CA = &CertificateAuthority{Cert: "-----BEGIN CERTIFICATE-----", Key: "-----BEGIN EC PRIVATE KEY-----"}
	c.ImageRepository = "registry.example.com/k8s"
	SetDefaults(c, Host{Name: "cp1", Address: "10.0.0.11"})
	data, err := c.Shared()
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{c.CertificateKey, "abcdef.0123456789abcdef", "PRIVATE KEY", "cp1", "10.0.0.11"} {
		if strings.Contains(string(data), secret) {
			t.Errorf("the shared configuration holds %q:\n%s", secret, data)
		}
	}
	got, err := ParseShared(data, Host{Name: "admin", Address: "10.0.0.99"})
	if err != nil {
		t.Fatal(err)
	}
	want := *c
	want.CertificateKey, want.BootstrapTokens, want.Certificates.CA = "", nil, nil
	want.TypeMeta = got.TypeMeta
	want.Node = got.Node
	if diff := cmp.Diff(&want, got); diff != "" {
		t.Errorf("read back (-want +got):\n%s", diff)
	}
	if got.Node.Name != "admin" {
		t.Errorf("node name %q, want this machine's", got.Node.Name)
	}

	if _, err := ParseShared([]byte("kind: ClusterConfiguration\napiVersion: "+APIVersion+"\nimageRepository: [\n"), Host{Name: "admin"}); err == nil || !strings.Contains(err.Error(), SharedSource) {
		t.Errorf("a shared configuration that does not parse: %v, want an error naming %s", err, SharedSource)
	}
}
