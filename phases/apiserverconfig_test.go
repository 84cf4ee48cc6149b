package phases

import (
	"bytes"
	"context"
	"encoding/base64"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/templates"
)

func runAPIServerConfigPhase(s *Node) error {
	_, err := workflow.Runner[*Node]{Phases: []workflow.Phase[*Node]{APIServerConfig}}.RunOne(context.Background(), s, APIServerConfig.Name)
	return err
}

// hostFile reads a node path of s.
func hostFile(t *testing.T, s *Node, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(s.Files.HostPath(path))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// secretOf extracts the base64 key of an encryption configuration.
func secretOf(t *testing.T, data []byte) string {
	t.Helper()
	m := regexp.MustCompile(`secret: (\S+)`).FindSubmatch(data)
	if m == nil {
		t.Fatalf("no key in %d bytes", len(data))
	}
	return string(m[1])
}

func TestAPIServerConfigCreatesThenReuses(t *testing.T) {
	root := t.TempDir()
	s := manifestState(t, root, "v1.36.3")
	must(t, runAPIServerConfigPhase(s))
	c := s.Config
	modes := map[string]fs.FileMode{
		c.EncryptionConfigPath(): 0o600, c.AuditPolicyPath(): 0o600, c.AdmissionConfigPath(): 0o600,
		c.AuthenticationConfigPath(): 0o600, c.APIServerConfigDir(): 0o700 | fs.ModeDir,
		c.Security.Audit.LogDir: 0o700 | fs.ModeDir, c.Certificates.Dir: 0o700 | fs.ModeDir,
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
	encryption := hostFile(t, s, c.EncryptionConfigPath())
	if provider, err := templates.CheckEncryptionConfig(encryption); err != nil || provider != config.ProviderSecretbox {
		t.Fatalf("generated file: %q, %v", provider, err)
	}
	key, err := base64.StdEncoding.DecodeString(secretOf(t, encryption))
	if err != nil || len(key) != 32 || bytes.Equal(key, make([]byte, 32)) {
		t.Fatalf("want 32 random bytes, got %d (%v)", len(key), err)
	}

	// A re-run keeps the key and writes nothing, but tightens a loose mode.
	must(t, os.Chmod(s.Files.HostPath(c.EncryptionConfigPath()), 0o644))
	before := snapshot(t, root)
	again := manifestState(t, root, "v1.36.3")
	must(t, runAPIServerConfigPhase(again))
	if w := again.Files.Changes().Written; len(w) != 0 {
		t.Errorf("re-run wrote %v", w)
	}
	after := snapshot(t, root)
	for path, b := range before {
		a := after[path]
		if a.content != b.content || !a.mtime.Equal(b.mtime) {
			t.Errorf("%s was rewritten", path)
		}
	}
	if mode := after[c.EncryptionConfigPath()].mode; mode != 0o600 {
		t.Errorf("loose mode not tightened: %v", mode)
	}
}

func TestEncryptionConfigInvalidIsAnError(t *testing.T) {
	s := manifestState(t, t.TempDir(), "v1.36.3")
	path := s.Config.EncryptionConfigPath()
	broken := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers: [{secretbox: {keys: [{name: k, secret: c2hvcnQ=}]}}]\n"
	writeHostFile(t, s, path, broken)
	err := runAPIServerConfigPhase(s)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "the secret is 5 bytes") {
		t.Fatalf("want an error naming %s and the problem, got %v", path, err)
	}
	if strings.Contains(err.Error(), "c2hvcnQ=") {
		t.Errorf("the error quotes the key: %v", err)
	}
	if got := string(hostFile(t, s, path)); got != broken {
		t.Error("an invalid file must be left for a human to fix")
	}
}

func TestEncryptionConfigOfAnotherProviderIsKept(t *testing.T) {
	root := t.TempDir()
	s := manifestState(t, root, "v1.36.3")
	must(t, runAPIServerConfigPhase(s))
	first := hostFile(t, s, s.Config.EncryptionConfigPath())
	var events bytes.Buffer
	again := manifestState(t, root, "v1.36.3")
	again.Config.Security.EncryptionAtRest.Provider = config.ProviderAESCBC
	again.Report = output.NewReporter(&events, false)
	must(t, runAPIServerConfigPhase(again))
	if !bytes.Equal(first, hostFile(t, again, again.Config.EncryptionConfigPath())) {
		t.Error("a valid file with another provider was rewritten")
	}
	if !strings.Contains(events.String(), "WARNING: ") || !strings.Contains(events.String(), "with secretbox, not aescbc") {
		t.Errorf("want a warning about the provider, got:\n%s", events.String())
	}
}

// TestDryRunNeverPrintsTheKey checks both output formats: the event names
// the file, its mode and size, never its content.
func TestDryRunNeverPrintsTheKey(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		root := t.TempDir()
		var events, stdout bytes.Buffer
		s := manifestState(t, root, "v1.36.3")
		report := output.NewReporter(&events, asJSON)
		s.Report = report
		s.Files = &files.DryRunWriter{Root: root, Report: report, Stdout: &stdout, Manifests: ManifestPaths(s.Config)}
		must(t, runAPIServerConfigPhase(s))
		data, err := s.Files.ReadFile(s.Config.EncryptionConfigPath())
		if err != nil {
			t.Fatal(err)
		}
		out := events.String() + stdout.String()
		if strings.Contains(out, secretOf(t, data)) || strings.Contains(out, "secret:") {
			t.Errorf("json=%v: the dry run printed the key:\n%s", asJSON, out)
		}
		if !strings.Contains(out, s.Config.EncryptionConfigPath()) || !strings.Contains(out, "0600") {
			t.Errorf("json=%v: the dry run does not name the file and its mode:\n%s", asJSON, out)
		}
		if entries, _ := os.ReadDir(root); len(entries) != 0 {
			t.Errorf("json=%v: the dry run wrote %v", asJSON, entries)
		}
	}
}

// TestRenewLeavesEncryptionConfig: `kubeboot certs renew all --new-keys`
// replaces every certificate and key, never the encryption key.
func TestRenewLeavesEncryptionConfig(t *testing.T) {
	root := t.TempDir()
	s := manifestState(t, root, "v1.36.3")
	must(t, runPKIPhases(s))
	must(t, runAPIServerConfigPhase(s))
	path := s.Config.EncryptionConfigPath()
	before := snapshot(t, root)[path]
	if _, err := RenewCerts(s, nil, true); err != nil {
		t.Fatal(err)
	}
	after := snapshot(t, root)[path]
	if after.content != before.content || !after.mtime.Equal(before.mtime) {
		t.Error("certs renew touched the encryption configuration")
	}
}

func TestUserAuditPolicy(t *testing.T) {
	s := manifestState(t, t.TempDir(), "v1.36.3")
	s.Config.Security.Audit.PolicyFile = "/etc/audit/policy.yaml"
	if err := runAPIServerConfigPhase(s); err == nil || !strings.Contains(err.Error(), `read audit policy "/etc/audit/policy.yaml": not found`) {
		t.Fatalf("missing policy: got %v", err)
	}
	writeHostFile(t, s, "/etc/audit/policy.yaml", "apiVersion: v1\nkind: ConfigMap\n")
	if err := runAPIServerConfigPhase(s); err == nil || !strings.Contains(err.Error(), "want an audit.k8s.io/v1 Policy") {
		t.Fatalf("not a policy: got %v", err)
	}
	writeHostFile(t, s, "/etc/audit/policy.yaml", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Metadata}]\n")
	must(t, runAPIServerConfigPhase(s))
	if _, err := os.Stat(s.Files.HostPath(filepath.Join(s.Config.APIServerConfigDir(), config.FileAuditPolicy))); err == nil {
		t.Error("kubeboot's policy was written beside the user's")
	}
}

func TestAPIServerConfigAllOffWritesNothing(t *testing.T) {
	root := t.TempDir()
	s := manifestState(t, root, "v1.36.3")
	off := false
	sec := &s.Config.Security
	sec.EncryptionAtRest.Enabled, sec.Audit.Enabled, sec.EventRateLimit, sec.AnonymousHealthChecksOnly = &off, &off, &off, &off
	must(t, runAPIServerConfigPhase(s))
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("with every switch off the phase wrote %v", entries)
	}
}
