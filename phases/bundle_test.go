package phases

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/config"
)

// exportedNode is a node with a PKI and an encryption config, and its secrets.
func exportedNode(t *testing.T) (*State, map[string][]byte) {
	t.Helper()
	s := manifestState(t, t.TempDir(), config.DefaultKubernetesVersion)
	if err := runPKIPhases(s); err != nil {
		t.Fatal(err)
	}
	if err := runAPIServerConfigPhase(s); err != nil {
		t.Fatal(err)
	}
	files, err := ExportSecrets(s)
	if err != nil {
		t.Fatal(err)
	}
	return s, files
}

func TestExportSecretsCarriesCAsSAAndEncryptionConfig(t *testing.T) {
	s, files := exportedNode(t)
	want := []string{"ca.crt", "ca.key", "encryption-config.yaml", "etcd/ca.crt", "etcd/ca.key",
		"front-proxy-ca.crt", "front-proxy-ca.key", "sa.key", "sa.pub"}
	if got := slices.Sorted(maps.Keys(files)); !slices.Equal(got, want) {
		t.Fatalf("exported %v, want %v", got, want)
	}
	if !bytes.Equal(files["ca.key"], hostFile(t, s, s.Config.KeyPath(config.CertCA))) {
		t.Error("ca.key in the export differs from the node's")
	}
}

func TestImportSecretsThenCertsReusesTheCAs(t *testing.T) {
	first, files := exportedNode(t)
	joiner := manifestState(t, t.TempDir(), config.DefaultKubernetesVersion)
	if err := ImportSecrets(joiner, files); err != nil {
		t.Fatal(err)
	}
	if err := runPKIPhases(joiner); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{config.CertCA, config.CertEtcdCA, config.CertFrontProxyCA} {
		if !bytes.Equal(hostFile(t, first, first.Config.CertPath(name)), hostFile(t, joiner, joiner.Config.CertPath(name))) {
			t.Errorf("%s differs after the certs phase: the joiner made its own CA", name)
		}
	}
	// The joiner's leaves chain to the shared CA.
	parseCert(t, joiner, config.CertAPIServer)
	// A second import of the same bundle converges: nothing is rewritten.
	before := snapshot(t, joiner.Files.HostPath("/"))
	if err := ImportSecrets(joiner, files); err != nil {
		t.Fatalf("re-import: %v", err)
	}
	if after := snapshot(t, joiner.Files.HostPath("/")); !maps.Equal(before, after) {
		t.Error("a re-import changed files")
	}
}

func TestImportSecretsRefusesAndWritesNothing(t *testing.T) {
	_, files := exportedNode(t)
	_, other := exportedNode(t)
	tests := []struct {
		name    string
		files   map[string][]byte
		prepare func(*State) error // makes the node differ
		want    string
	}{
		{"missing CA key", without(files, "ca.key"), nil, "ca.key: missing from the bundle"},
		{"unknown file", with(files, "apiserver.key", []byte("x")), nil, "not a file a bundle carries"},
		{"mismatched pair", with(files, "ca.key", other["ca.key"]), nil, "do not form a pair"},
		{"node has other CAs", files, runPKIPhases, "differs from the bundle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := manifestState(t, t.TempDir(), config.DefaultKubernetesVersion)
			if tt.prepare != nil {
				if err := tt.prepare(s); err != nil {
					t.Fatal(err)
				}
			}
			before := snapshot(t, s.Files.HostPath("/"))
			err := ImportSecrets(s, tt.files)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ImportSecrets: got %v, want an error containing %q", err, tt.want)
			}
			if after := snapshot(t, s.Files.HostPath("/")); !maps.Equal(before, after) {
				t.Error("a refused import changed files")
			}
		})
	}
}

func without(m map[string][]byte, name string) map[string][]byte {
	out := maps.Clone(m)
	delete(out, name)
	return out
}

func with(m map[string][]byte, name string, data []byte) map[string][]byte {
	out := maps.Clone(m)
	out[name] = data
	return out
}
