package controlplane

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
	"github.com/kubeboot/kubeboot/pki"
)

// exportedNode is a node with a PKI and an encryption config, and its secrets.
func exportedNode(t *testing.T) (*phases.Node, map[string][]byte) {
	t.Helper()
	s := phasestest.NewNode(t, t.TempDir(), config.DefaultKubernetesVersion)
	if err := phasestest.Run(s, phases.Certs, phases.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	if err := phasestest.Run(s, phases.APIServerConfig); err != nil {
		t.Fatal(err)
	}
	files, err := phases.ClusterSecrets(s)
	if err != nil {
		t.Fatal(err)
	}
	return s, files
}

func TestClusterSecretsCarryCAsSAAndEncryptionConfig(t *testing.T) {
	s, files := exportedNode(t)
	want := []string{"ca.crt", "ca.key", "encryption-config.yaml", "etcd/ca.crt", "etcd/ca.key",
		"front-proxy-ca.crt", "front-proxy-ca.key", "sa.key", "sa.pub"}
	if got := slices.Sorted(maps.Keys(files)); !slices.Equal(got, want) {
		t.Fatalf("exported %v, want %v", got, want)
	}
	if !bytes.Equal(files["ca.key"], phasestest.HostFile(t, s, s.Config.KeyPath(config.CertCA))) {
		t.Error("ca.key in the export differs from the node's")
	}
}

func TestImportSecretsThenCertsReusesTheCAs(t *testing.T) {
	first, files := exportedNode(t)
	joiner := phasestest.NewNode(t, t.TempDir(), config.DefaultKubernetesVersion)
	if err := ImportSecrets(joiner, files); err != nil {
		t.Fatal(err)
	}
	if err := phasestest.Run(joiner, phases.Certs, phases.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{config.CertCA, config.CertEtcdCA, config.CertFrontProxyCA} {
		if !bytes.Equal(phasestest.HostFile(t, first, first.Config.CertPath(name)), phasestest.HostFile(t, joiner, joiner.Config.CertPath(name))) {
			t.Errorf("%s differs after the certs phase: the joiner made its own CA", name)
		}
	}
	// The joiner's leaves chain to the shared CA.
	phasestest.ParseCert(t, joiner, config.CertAPIServer)
	// A second import of the same bundle converges: nothing is rewritten.
	before := phasestest.Snapshot(t, joiner.Files.HostPath("/"))
	if err := ImportSecrets(joiner, files); err != nil {
		t.Fatalf("re-import: %v", err)
	}
	if after := phasestest.Snapshot(t, joiner.Files.HostPath("/")); !maps.Equal(before, after) {
		t.Error("a re-import changed files")
	}
}

func TestImportSecretsRefusesAndWritesNothing(t *testing.T) {
	exporter, files := exportedNode(t)
	_, other := exportedNode(t)
	// A leaf with its key is a pair, but no CA.
	leafCert := phasestest.HostFile(t, exporter, exporter.Config.CertPath(config.CertAPIServer))
	leafKey := phasestest.HostFile(t, exporter, exporter.Config.KeyPath(config.CertAPIServer))
	// cfssl backdates a CA by five minutes, so one valid for a minute has expired.
	spec := pki.CertSpecs(exporter.Config)[0]
	spec.Validity = time.Minute
	expired, err := pki.NewCA(spec)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		files   map[string][]byte
		prepare func(*phases.Node) error // makes the node differ
		want    string
	}{
		{"missing CA key", without(files, "ca.key"), nil, "ca.key: missing from the bundle"},
		{"unknown file", with(files, "apiserver.key", []byte("x")), nil, "not a file a bundle carries"},
		{"mismatched pair", with(files, "ca.key", other["ca.key"]), nil, "do not form a pair"},
		{"a leaf as the CA", with(with(files, "ca.crt", leafCert), "ca.key", leafKey), nil, "ca.crt: is not a CA certificate"},
		{"an expired CA", with(with(files, "front-proxy-ca.crt", expired.Cert), "front-proxy-ca.key", expired.Key), nil, "front-proxy-ca.crt: expired on"},
		{"garbage encryption config", with(files, "encryption-config.yaml", []byte("garbage")), nil, `check encryption config "encryption-config.yaml": not a YAML EncryptionConfiguration`},
		{"sa.pub of another key", with(files, "sa.pub", other["sa.pub"]), nil, "sa.pub"},
		{"node has other CAs", files, func(s *phases.Node) error { return phasestest.Run(s, phases.Certs, phases.Kubeconfig) }, "differs from the bundle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := phasestest.NewNode(t, t.TempDir(), config.DefaultKubernetesVersion)
			if tt.prepare != nil {
				if err := tt.prepare(s); err != nil {
					t.Fatal(err)
				}
			}
			before := phasestest.Snapshot(t, s.Files.HostPath("/"))
			err := ImportSecrets(s, tt.files)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ImportSecrets: got %v, want an error containing %q", err, tt.want)
			}
			if after := phasestest.Snapshot(t, s.Files.HostPath("/")); !maps.Equal(before, after) {
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
