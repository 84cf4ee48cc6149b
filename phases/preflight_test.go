package phases

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/testsupport"
	"github.com/kubeboot/kubeboot/internal/workflow"
)

// preflightState is a node rooted in a temp dir, on 127.0.0.1 with a free
// API server port, so the port checks run for real.
func preflightState(t *testing.T) (*Node, *bytes.Buffer) {
	t.Helper()
	c := config.New()
	config.SetDefaults(c, config.Host{Name: "node1", Address: "127.0.0.1"})
	c.APIServer.BindPort = int32(testsupport.FreePort(t))
	var out bytes.Buffer
	return &Node{Run: &workflow.Run{System: workflow.HostSystem("v0.0.0-test"), Files: &files.AtomicWriter{Root: t.TempDir()}, Report: output.NewReporter(&out, false)}, Config: c}, &out
}

func writeHostFile(t *testing.T, s *Node, path, content string) {
	t.Helper()
	host := s.Files.HostPath(path)
	if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(host, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// runChecks runs only the named checks: the others are ignored, since their
// ports may be taken by unrelated processes on a shared CI machine.
func runChecks(t *testing.T, s *Node, names ...string) error {
	t.Helper()
	checks, err := preflightChecks(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range checks {
		keep := false
		for _, n := range names {
			keep = keep || c.Name == n
		}
		if !keep {
			s.Options.IgnorePreflightErrors = append(s.Options.IgnorePreflightErrors, strings.ToLower(c.Name))
		}
	}
	return runPreflight(context.Background(), s)
}

// occupyAPIServerPort listens on the API server's port until the test ends
// and returns the port.
func occupyAPIServerPort(t *testing.T, s *Node) string {
	t.Helper()
	port := strconv.Itoa(int(s.Config.APIServer.BindPort))
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return port
}

func TestPreflightPortInUse(t *testing.T) {
	s, out := preflightState(t)
	port := occupyAPIServerPort(t, s)
	err := runChecks(t, s, "Port-"+port)
	if err == nil || !strings.Contains(err.Error(), "Port-"+port) || !strings.Contains(err.Error(), "--ignore-preflight-errors=Port-"+port) {
		t.Fatalf("want a failed port check with its fix, got %v", err)
	}
	if !strings.Contains(out.String(), ":"+port+" is in use, and not by a kube-apiserver of ours") || !strings.Contains(out.String(), "ss -ltnp") {
		t.Errorf("no explanation in %q", out.String())
	}

	// The same port held by our own API server is a re-run, not a conflict.
	writeHostFile(t, s, s.Config.ManifestPath(config.NameAPIServer), "kind: Pod\n")
	if err := runChecks(t, s, "Port-"+port); err != nil {
		t.Errorf("re-run on our own port failed: %v", err)
	}
}

func TestPreflightIgnoredCheckIsAWarning(t *testing.T) {
	s, out := preflightState(t)
	port := occupyAPIServerPort(t, s)
	s.Options.IgnorePreflightErrors = []string{"port-" + port}
	if err := runChecks(t, s, "Port-"+port); err != nil {
		t.Fatalf("ignored check failed the phase: %v", err)
	}
	if !strings.Contains(out.String(), "WARNING: Port-"+port) {
		t.Errorf("no warning in %q", out.String())
	}
}

func TestPreflightManifestDir(t *testing.T) {
	s, out := preflightState(t)
	dir := s.Config.Paths.ManifestsDir
	writeHostFile(t, s, filepath.Join(dir, "etcd.yaml"), "")
	writeHostFile(t, s, filepath.Join(dir, ".etcd.yaml.tmp-1"), "")
	writeHostFile(t, s, filepath.Join(dir, "kube-apiserver.yaml.bak"), "")
	if err := runChecks(t, s, "ManifestDir"); err != nil {
		t.Fatalf("a foreign file must only warn without --strict: %v", err)
	}
	if !strings.Contains(out.String(), "WARNING: ManifestDir") || !strings.Contains(out.String(), ": kube-apiserver.yaml.bak;") {
		t.Errorf("warning does not name exactly the foreign file: %q", out.String())
	}
	s.Options.Strict = true
	if err := runChecks(t, s, "ManifestDir"); err == nil || !strings.Contains(err.Error(), "ManifestDir") {
		t.Errorf("--strict must fail on a foreign file, got %v", err)
	}
}

func TestPreflightEtcdDataDir(t *testing.T) {
	s, _ := preflightState(t)
	if err := runChecks(t, s, "EtcdDataDir"); err != nil {
		t.Fatalf("a missing data dir is fine: %v", err)
	}
	writeHostFile(t, s, filepath.Join(s.Config.Etcd.Local.DataDir, "member/snap/db"), "x")
	if err := runChecks(t, s, "EtcdDataDir"); err == nil || !strings.Contains(err.Error(), "EtcdDataDir") {
		t.Fatalf("a foreign data dir must fail, got %v", err)
	}
	writeHostFile(t, s, s.Config.ManifestPath(config.NameEtcd), "    - --data-dir=/var/lib/etcd\n")
	if err := runChecks(t, s, "EtcdDataDir"); err != nil {
		t.Errorf("our own data dir on a re-run must pass: %v", err)
	}
}

func TestPreflightOfflineSkipsHostChecks(t *testing.T) {
	s, _ := preflightState(t)
	s.Options.Offline = true
	var names []string
	checks, err := preflightChecks(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range checks {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "ManifestDir" {
		t.Errorf("offline checks = %v, want only ManifestDir", names)
	}
}

func TestPreflightManifestDirExactNames(t *testing.T) {
	s, out := preflightState(t)
	s.Config.Etcd = config.Etcd{External: &config.ExternalEtcd{Endpoints: []string{"https://10.0.0.2:2379"}, CAFile: "/e/ca.crt", CertFile: "/e/c.crt", KeyFile: "/e/c.key"}}
	dir := s.Config.Paths.ManifestsDir
	writeHostFile(t, s, filepath.Join(dir, "kube-apiserver"), "")             // a copy without extension
	writeHostFile(t, s, filepath.Join(dir, "etcd.yaml"), "")                  // not ours with an external etcd
	writeHostFile(t, s, filepath.Join(dir, "sub", "kube-apiserver.yaml"), "") // the kubelet skips subdirectories
	if err := runChecks(t, s, "ManifestDir"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), ": etcd.yaml, kube-apiserver;") {
		t.Errorf("want exactly etcd.yaml and kube-apiserver flagged, got %q", out.String())
	}
}

// TestPreflightChecksRenderedListeners covers listeners the flags move: the
// controller-manager's port set through extraArgs, on its loopback address.
func TestPreflightChecksRenderedListeners(t *testing.T) {
	s, out := preflightState(t)
	port := testsupport.FreePort(t)
	s.Config.ControllerManager.ExtraArgs = []config.Arg{{Name: "secure-port", Value: strconv.Itoa(port)}}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	if err := runChecks(t, s, "Port-"+strconv.Itoa(port)); err == nil {
		t.Fatalf("a taken controller-manager port passed; output:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "127.0.0.1:"+strconv.Itoa(port)+" is in use, and not by a kube-controller-manager") {
		t.Errorf("the failure does not name the address and component: %q", out.String())
	}
}

// TestPreflightEtcdRestore: init and join refuse to write the node while a
// restore of its etcd is under way.
func TestPreflightEtcdRestore(t *testing.T) {
	s, _ := preflightState(t)
	if err := runChecks(t, s, "EtcdRestore"); err != nil {
		t.Fatalf("no restore under way: %v", err)
	}
	writeHostFile(t, s, RestoreJournalPath(s.Config), `{"snapshot":"/tmp/s.db","stage":"stopped"}`)
	if err := runChecks(t, s, "EtcdRestore"); err == nil || !strings.Contains(err.Error(), "EtcdRestore") {
		t.Errorf("a restore under way: %v", err)
	}
}

// staticBinary builds a statically linked program, as `make build` builds
// kubeboot.
func staticBinary(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "kubeboot")
	build := exec.Command("go", "build", "-o", bin, src)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestPreflightKubebootBinary: kubeboot's own pods run the node's binary
// in the pause image, so a node whose kubeboot is dynamically linked, or
// no executable at all, fails preflight with the fix; a node that runs
// none of kubeboot's pods is not asked.
func TestPreflightKubebootBinary(t *testing.T) {
	script := filepath.Join(t.TempDir(), "kubeboot")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		binary, want string
	}{
		{staticBinary(t), ""},
		{"/bin/sh", "CGO_ENABLED=0"},
		{script, "no ELF executable"},
	} {
		s, _ := preflightState(t)
		s.System.Kubeboot.Binary = tc.binary
		err := runChecks(t, s, "KubebootBinary")
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), "KubebootBinary")) {
			t.Errorf("%s: %v, want failure %v", tc.binary, err, tc.want != "")
		}
		if tc.want != "" && CheckKubebootBinary(tc.binary) == nil || tc.want != "" && !strings.Contains(CheckKubebootBinary(tc.binary).Error(), tc.want) {
			t.Errorf("%s: %v, want the fix %q", tc.binary, CheckKubebootBinary(tc.binary), tc.want)
		}
	}
	s, _ := preflightState(t)
	off := false
	s.Config.CSRApprover.Enabled = &off
	s.System.Kubeboot.Binary = "/bin/sh"
	checks, err := preflightChecks(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range checks {
		if c.Name == "KubebootBinary" {
			t.Error("a node without kubeboot's pods checks the kubeboot binary")
		}
	}
}

// TestPreflightReadsTheUsersManifests: a manifest of addons.manifests
// that does not parse stops init at preflight, with exit 2 naming the
// file, before anything is written; one that parses passes.
func TestPreflightReadsTheUsersManifests(t *testing.T) {
	s, _ := preflightState(t)
	writeHostFile(t, s, "/etc/kubeboot/manifests/app.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n")
	writeHostFile(t, s, "/etc/kubeboot/bad.yaml", "kind: [\n")
	s.Config.Addons.Manifests = []string{"/etc/kubeboot/manifests"}
	if err := runChecks(t, s, "ManifestDir"); err != nil {
		t.Errorf("a good manifest: %v", err)
	}
	s.Config.Addons.Manifests = []string{"/etc/kubeboot/manifests", "/etc/kubeboot/bad.yaml"}
	err := runChecks(t, s, "ManifestDir")
	if exit.Code(err) != exit.Usage || err == nil || !strings.Contains(err.Error(), "/etc/kubeboot/bad.yaml") {
		t.Errorf("a manifest that does not parse: exit %d, %v", exit.Code(err), err)
	}
}
