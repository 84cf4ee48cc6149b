package phases

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/pki"
)

func runPKIPhases(s *Node) error {
	_, err := workflow.Runner[*Node]{Phases: []workflow.Phase[*Node]{Certs, Kubeconfig}}.Run(context.Background(), s, nil)
	return err
}

// fileState is what a re-run must not change.
type fileState struct {
	mtime   time.Time
	mode    fs.FileMode
	content string
}

// snapshot records every file under root.
func snapshot(t *testing.T, root string) map[string]fileState {
	t.Helper()
	files := map[string]fileState{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		files[strings.TrimPrefix(path, root)] = fileState{info.ModTime(), info.Mode(), string(data)}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestPKIPhasesCreateThenReuse(t *testing.T) {
	root := t.TempDir()
	s := manifestState(t, root, "v1.36.3")
	must(t, runPKIPhases(s))
	c := s.Config
	modes := map[string]fs.FileMode{
		c.CertPath(config.CertCA): 0o644, c.KeyPath(config.CertCA): 0o600,
		c.KeyPath(config.CertEtcdServer): 0o600, c.PublicKeyPath(config.KeyServiceAccount): 0o644,
		c.KeyPath(config.KeyServiceAccount): 0o600, c.KubeconfigPath(config.KubeconfigAdmin): 0o600,
		c.Certificates.Dir: 0o700 | fs.ModeDir, filepath.Dir(c.CertPath(config.CertEtcdCA)): 0o700 | fs.ModeDir,
	}
	for path, want := range modes {
		info, err := os.Stat(s.Files.HostPath(path))
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode() != want {
			t.Errorf("%s: mode %v, want %v", path, info.Mode(), want)
		}
	}
	// Loosen a key's mode: the re-run must tighten it and rewrite nothing.
	must(t, os.Chmod(s.Files.HostPath(c.KeyPath(config.CertAPIServer)), 0o644))
	before := snapshot(t, root)
	again := manifestState(t, root, "v1.36.3")
	must(t, runPKIPhases(again))
	if w := again.Files.Changes().Written; len(w) != 0 {
		t.Errorf("re-run wrote %v", w)
	}
	after := snapshot(t, root)
	key := c.KeyPath(config.CertAPIServer)
	if after[key].mode != 0o600 || after[key].content != before[key].content {
		t.Errorf("loose key mode not tightened, or the key rewritten: %v", after[key].mode)
	}
	delete(before, key)
	delete(after, key)
	for path, b := range before {
		if after[path] != b {
			t.Errorf("re-run changed %s (content or mtime)", path)
		}
	}
}

func TestPKIPhaseWrongSANAndRenew(t *testing.T) {
	root := t.TempDir()
	must(t, runPKIPhases(manifestState(t, root, "v1.36.3")))
	s := manifestState(t, root, "v1.36.3")
	s.Config.APIServer.CertSANs = []string{"10.0.0.5"}
	err := runPKIPhases(s)
	if err == nil || !strings.Contains(err.Error(), "apiserver.crt: lacks IP SAN 10.0.0.5") || !strings.Contains(err.Error(), "--renew") {
		t.Fatalf("want the exact difference and the --renew hint, got %v", err)
	}
	s.Options.Renew = true
	must(t, runPKIPhases(s))
	cert := parseCert(t, s, config.CertAPIServer)
	found := false
	for _, ip := range cert.IPAddresses {
		found = found || ip.String() == "10.0.0.5"
	}
	if !found {
		t.Errorf("renewed apiserver.crt lacks 10.0.0.5: %v", cert.IPAddresses)
	}
	if w := s.Files.Changes().Written; len(w) != 1 || w[0] != s.Config.CertPath(config.CertAPIServer) {
		t.Errorf("--renew wrote %v, want only apiserver.crt (same key)", w)
	}
}

func TestPKIPhaseExternalCA(t *testing.T) {
	root := t.TempDir()
	must(t, runPKIPhases(manifestState(t, root, "v1.36.3")))
	s := manifestState(t, root, "v1.36.3")
	must(t, os.Remove(s.Files.HostPath(s.Config.KeyPath(config.CertCA))))
	must(t, runPKIPhases(s))
	if w := s.Files.Changes().Written; len(w) != 0 {
		t.Errorf("external-CA mode wrote %v", w)
	}
	// A leaf that needs the missing CA key cannot be created.
	must(t, os.Remove(s.Files.HostPath(s.Config.CertPath(config.CertAPIServer))))
	s = manifestState(t, root, "v1.36.3")
	if err := runPKIPhases(s); err == nil || !strings.Contains(err.Error(), "ca.key") {
		t.Errorf("want an error naming the missing CA key, got %v", err)
	}
}

func TestPKIPhaseUsesProvidedCA(t *testing.T) {
	root := t.TempDir()
	s := manifestState(t, root, "v1.36.3")
	spec := pki.CertSpecs(s.Config)[0]
	spec.CN = "my-own-ca"
	ca, err := pki.NewCA(spec)
	must(t, err)
	must(t, s.Files.MkdirAll(s.Config.Certificates.Dir, 0o700))
	must(t, s.Files.WriteFile(s.Config.CertPath(config.CertCA), ca.Cert, 0o644))
	must(t, s.Files.WriteFile(s.Config.KeyPath(config.CertCA), ca.Key, 0o600))
	must(t, runPKIPhases(manifestState(t, root, "v1.36.3")))
	if got := parseCert(t, s, config.CertCA).Subject.CommonName; got != "my-own-ca" {
		t.Errorf("the provided CA was replaced by %q", got)
	}
	if got := parseCert(t, s, config.CertAPIServer).Issuer.CommonName; got != "my-own-ca" {
		t.Errorf("apiserver.crt issued by %q, want the provided CA", got)
	}
}

func TestPKIPhaseExpiringCertNeedsRenew(t *testing.T) {
	root := t.TempDir()
	s := manifestState(t, root, "v1.36.3")
	s.Config.Certificates.LeafValidity.Duration = 20 * 24 * time.Hour // inside the 30-day renewal window
	s.Config.Certificates.RenewBefore.Duration = 0
	must(t, runPKIPhases(s))
	again := manifestState(t, root, "v1.36.3")
	if err := runPKIPhases(again); err == nil || !strings.Contains(err.Error(), "renewal window") {
		t.Fatalf("want an expiring-certificate error, got %v", err)
	}
	again.Options.Renew = true
	must(t, runPKIPhases(again))
	if left := time.Until(parseCert(t, again, config.CertAPIServer).NotAfter); left < 300*24*time.Hour {
		t.Errorf("renewed certificate expires in %v, want about a year", left)
	}
}

func parseCert(t *testing.T, s *Node, name string) *x509.Certificate {
	t.Helper()
	data, err := s.Files.ReadFile(s.Config.CertPath(name))
	must(t, err)
	block, _ := pem.Decode(data)
	cert, err := x509.ParseCertificate(block.Bytes)
	must(t, err)
	return cert
}

func TestKubeconfigPhaseNeedsCerts(t *testing.T) {
	s := manifestState(t, t.TempDir(), "v1.36.3")
	err := Kubeconfig.Run(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "/etc/kubernetes/pki/ca.crt not found: run `kubeboot init phase certs` first") {
		t.Errorf("want a hint to run the certs phase, got %v", err)
	}
}

func TestPKIPhaseRemovesTempFilesOfAKilledWrite(t *testing.T) {
	root := t.TempDir()
	s := manifestState(t, root, "v1.36.3")
	leftover := filepath.Join(s.Config.Certificates.Dir, ".sa.key.tmp-123")
	writeHostFile(t, s, leftover, "partial key")
	must(t, runPKIPhases(s))
	if _, err := os.Stat(s.Files.HostPath(leftover)); !os.IsNotExist(err) {
		t.Errorf("%s survived the next run: %v", leftover, err)
	}
}

// TestPKIPhaseCAExpiringWithinRenewalWindow: leaves issued by a CA that
// expires within the renewal window expire with it, and no renewal makes
// them last longer. Each run warns, naming the CA; none fails on them,
// except with --strict, which fails on the CA before writing anything.
func TestPKIPhaseCAExpiringWithinRenewalWindow(t *testing.T) {
	root := t.TempDir()
	s := manifestState(t, root, "v1.36.3")
	spec := pki.CertSpecs(s.Config)[0]
	spec.Validity = 48 * time.Hour
	ca, err := pki.NewCA(spec)
	must(t, err)
	must(t, s.Files.MkdirAll(s.Config.Certificates.Dir, 0o700))
	must(t, s.Files.WriteFile(s.Config.CertPath(config.CertCA), ca.Cert, 0o644))
	must(t, s.Files.WriteFile(s.Config.KeyPath(config.CertCA), ca.Key, 0o600))
	caWarning := "/etc/kubernetes/pki/ca.crt expires "
	tests := []struct {
		name          string
		renew, strict bool
		wantErr       string
	}{
		{name: "first run"},
		{name: "second run"},
		{name: "renew", renew: true},
		{name: "strict", strict: true, wantErr: caWarning},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			run := manifestState(t, root, "v1.36.3")
			run.Report = output.NewReporter(&out, false)
			run.Options.Renew, run.Options.Strict = tt.renew, tt.strict
			before := snapshot(t, root)
			err := runPKIPhases(run)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "re-create the cluster PKI") {
					t.Fatalf("want an error naming the CA, got %v", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), caWarning) && tt.wantErr == "" {
				t.Errorf("no warning naming the CA in:\n%s", out.String())
			}
			if tt.name == "first run" {
				return
			}
			if w := run.Files.Changes().Written; len(w) != 0 {
				t.Errorf("wrote %v", w)
			}
			if after := snapshot(t, root); !maps.Equal(before, after) {
				t.Error("the files changed")
			}
		})
	}
	if got, want := parseCert(t, s, config.CertAPIServer).NotAfter, parseCert(t, s, config.CertCA).NotAfter; !got.Equal(want) {
		t.Errorf("apiserver.crt expires %v, want it clamped to the CA's %v", got, want)
	}
}

// TestPKIPhaseWarnsOfChangedKeyAlgorithm: existing keys are kept when the
// configured algorithm changes, and the certs phase says so and what fixes it.
func TestPKIPhaseWarnsOfChangedKeyAlgorithm(t *testing.T) {
	root := t.TempDir()
	must(t, runPKIPhases(manifestState(t, root, "v1.36.3")))
	var out bytes.Buffer
	s := manifestState(t, root, "v1.36.3")
	s.Config.Certificates.KeyAlgorithm = config.RSA2048
	s.Report = output.NewReporter(&out, false)
	must(t, runPKIPhases(s))
	if w := s.Files.Changes().Written; len(w) != 0 {
		t.Errorf("wrote %v", w)
	}
	for _, want := range []string{"apiserver.crt", "admin.conf", "key is ecdsa-p256, certificates.keyAlgorithm is rsa-2048", "kubeboot certs renew --new-keys"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestPKIPhasesUseTheConfiguredCA: a node whose configuration carries
// certificates.ca (a fleet's first node) gets that CA on its disk and
// certificates it signed; a node whose disk holds another CA is refused,
// and nothing of it changes.
func TestPKIPhasesUseTheConfiguredCA(t *testing.T) {
	s := manifestState(t, t.TempDir(), "v1.36.3")
	var spec pki.CertSpec
	for _, sp := range pki.CertSpecs(s.Config) {
		if sp.Name == config.CertCA {
			spec = sp
		}
	}
	ca, err := pki.NewCA(spec)
	must(t, err)
	s.Config.Certificates.CA = &config.CertificateAuthority{Cert: string(ca.Cert), Key: string(ca.Key)}
	must(t, runPKIPhases(s))
	onDisk, err := os.ReadFile(s.Files.HostPath(s.Config.CertPath(config.CertCA)))
	must(t, err)
	if !bytes.Equal(onDisk, ca.Cert) {
		t.Fatalf("ca.crt is not certificates.ca's cert")
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.Cert)
	if _, err := parseCert(t, s, config.CertAPIServer).Verify(x509.VerifyOptions{Roots: roots}); err != nil {
		t.Errorf("apiserver.crt is not signed by certificates.ca: %v", err)
	}

	other := manifestState(t, t.TempDir(), "v1.36.3")
	must(t, runPKIPhases(other))
	before := snapshot(t, other.Files.HostPath("/"))
	again := manifestState(t, other.Files.HostPath("/"), "v1.36.3")
	again.Config.Certificates.CA = s.Config.Certificates.CA
	if err := runPKIPhases(again); err == nil || !strings.Contains(err.Error(), "certificates.ca is another CA than the one in /etc/kubernetes/pki") {
		t.Fatalf("a node of another CA: %v", err)
	}
	if after := snapshot(t, other.Files.HostPath("/")); !maps.Equal(before, after) {
		t.Error("the refused run changed the node's files")
	}
}
