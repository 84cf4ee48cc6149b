package nodefile_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/nodefile"
	"github.com/kubeboot/kubeboot/pki"
)

func TestReplaceCA(t *testing.T) {
	cfg := config.New()
	config.SetDefaults(cfg, config.Host{Name: "cp1", Address: "10.0.0.11"})
	ca := func() config.CertificateAuthority {
		pair, err := pki.NewCA(pki.CertSpecs(cfg)[0])
		if err != nil {
			t.Fatal(err)
		}
		return config.CertificateAuthority{Cert: string(pair.Cert), Key: string(pair.Key)}
	}
	old, next := ca(), ca()
	body, err := sigsyaml.Marshal(map[string]any{"certificates": map[string]any{"ca": old, "keyAlgorithm": "ECDSA-P256"}, "kind": "ClusterConfiguration"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(path, append([]byte("# the first node's file\n"), body...), 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := nodefile.ReplaceCA(path, old, next); err != nil || !changed {
		t.Fatalf("ReplaceCA = %v, %v", changed, err)
	}
	data, _ := os.ReadFile(path)
	var doc struct {
		Certificates struct {
			CA           config.CertificateAuthority `json:"ca"`
			KeyAlgorithm string                      `json:"keyAlgorithm"`
		} `json:"certificates"`
	}
	if err := sigsyaml.Unmarshal(data, &doc); err != nil || doc.Certificates.CA != next || doc.Certificates.KeyAlgorithm != "ECDSA-P256" {
		t.Fatalf("after ReplaceCA the file holds %+v (%v)", doc, err)
	}
	if !strings.HasPrefix(string(data), "# the first node's file\n") {
		t.Error("ReplaceCA lost the file's comment")
	}
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", info.Mode().Perm())
	}
	if changed, err := nodefile.ReplaceCA(path, next, next); err != nil || changed {
		t.Fatalf("ReplaceCA again = %v, %v; want nothing changed", changed, err)
	}
	// A file that holds another CA is refused, and left as it was.
	if _, err := nodefile.ReplaceCA(path, old, ca()); err == nil || !strings.Contains(err.Error(), "certificates.ca cannot be moved") {
		t.Fatalf("ReplaceCA of a CA the file does not hold: %v", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(data) {
		t.Error("a refused ReplaceCA changed the file")
	}
}
