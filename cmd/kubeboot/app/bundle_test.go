package app

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/bundle"
)

func TestCertsExport(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if code, _, stderr := runCLI(t, "init", "--root", root, "--skip-phases", "etcd,control-plane,validate,write-manifests"); code != 0 {
		t.Fatalf("init: %s", stderr)
	}
	out := filepath.Join(dir, "out", "secrets.bundle")
	code, stdout, stderr := runCLI(t, "certs", "export", "--root", root, "--out", out)
	if code != 0 {
		t.Fatalf("export: code %d, stderr %q", code, stderr)
	}
	// The key is printed exactly once, on stdout, and nowhere else.
	if !regexp.MustCompile(`^[0-9a-f]{64}\n$`).MatchString(stdout) {
		t.Fatalf("stdout %q is not one hex key", stdout)
	}
	keyText := strings.TrimSpace(stdout)
	if strings.Contains(stderr, keyText) {
		t.Error("the key is on stderr too")
	}
	info, err := os.Stat(out)
	if err != nil || info.Mode().Perm() != bundleMode {
		t.Fatalf("bundle %s: %v, mode %v", out, err, info)
	}
	entries, _ := os.ReadDir(filepath.Dir(out))
	if len(entries) != 1 {
		t.Errorf("the bundle's directory holds %d files, want only the bundle", len(entries))
	}

	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte(keyText+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files, err := openBundle(out, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	caKey, _ := os.ReadFile(filepath.Join(root, "/etc/kubernetes/pki/ca.key"))
	if string(files["ca.key"]) != string(caKey) {
		t.Error("the bundle's ca.key is not the node's")
	}

	// With --key-file, nothing goes to stdout and the same key opens it.
	out2 := filepath.Join(dir, "again.bundle")
	code, stdout, stderr = runCLI(t, "certs", "export", "--root", root, "--out", out2, "--key-file", keyFile)
	if code != 0 || stdout != "" {
		t.Fatalf("export --key-file: code %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, err := openBundle(out2, keyFile); err != nil {
		t.Fatal(err)
	}

	other, _ := bundle.NewKey()
	wrong := filepath.Join(dir, "wrong")
	if err := os.WriteFile(wrong, []byte(bundle.EncodeKey(other)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openBundle(out, wrong); err == nil || !strings.Contains(err.Error(), "key is wrong or the bundle was modified") {
		t.Errorf("wrong key: got %v", err)
	}
	if code, _, stderr := runCLI(t, "certs", "export", "--root", root); code != 2 || !strings.Contains(stderr, "--out") {
		t.Errorf("export without --out: code %d, stderr %q", code, stderr)
	}
}

func TestJoinRefusesBadBundlesAndWritesNothing(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if code, _, stderr := runCLI(t, "init", "--root", root, "--skip-phases", "etcd,control-plane,validate,write-manifests"); code != 0 {
		t.Fatalf("init: %s", stderr)
	}
	bundlePath := filepath.Join(dir, "b")
	code, stdout, stderr := runCLI(t, "certs", "export", "--root", root, "--out", bundlePath)
	if code != 0 {
		t.Fatalf("export: %s", stderr)
	}
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte(stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	other, _ := bundle.NewKey()
	wrongKey := filepath.Join(dir, "wrong")
	if err := os.WriteFile(wrongKey, []byte(bundle.EncodeKey(other)), 0o600); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(bundlePath)
	data[len(data)/2] ^= 1
	tampered := filepath.Join(dir, "tampered")
	if err := os.WriteFile(tampered, data, 0o600); err != nil {
		t.Fatal(err)
	}
	node := filepath.Join(dir, "node")
	joinConfig := filepath.Join(dir, "join.yaml")
	text := "apiVersion: kubeboot.io/v1alpha1\nkind: JoinConfiguration\ncontrolPlaneEndpoint: 127.0.0.1:1\n" +
		"certificates: {dir: " + node + "/pki}\npaths: {manifestsDir: " + node + "/manifests, kubeconfigDir: " + node + "}\n" +
		"etcd: {local: {dataDir: " + node + "/etcd}}\njoin: {etcdEndpoints: [https://127.0.0.1:1]}\n"
	if err := os.WriteFile(joinConfig, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"without --control-plane", []string{"--config", joinConfig}, 2, "a JoinConfiguration is for `kubeboot join --control-plane`"},
		{"wrong key", []string{"--control-plane", "--config", joinConfig, "--certs-bundle", bundlePath, "--key-file", wrongKey}, 2, "the key is wrong or the bundle was modified"},
		{"tampered bundle", []string{"--control-plane", "--config", joinConfig, "--certs-bundle", tampered, "--key-file", keyFile}, 2, "the key is wrong or the bundle was modified"},
		{"no bundle", []string{"--control-plane", "--config", joinConfig, "--certs-bundle", filepath.Join(dir, "missing"), "--key-file", keyFile}, 2, "--certs-bundle: read certificate bundle"},
		{"a directory for a bundle", []string{"--control-plane", "--config", joinConfig, "--certs-bundle", dir, "--key-file", keyFile}, 2, "not a regular file: it is a directory"},
		{"a key for a bundle", []string{"--control-plane", "--config", joinConfig, "--certs-bundle", keyFile, "--key-file", keyFile}, 2, "not a kubeboot certificate bundle"},
		{"bundle without key", []string{"--control-plane", "--config", joinConfig, "--certs-bundle", bundlePath}, 2, "go together"},
		{"unreachable endpoint", []string{"--control-plane", "--config", joinConfig, "--certs-bundle", bundlePath, "--key-file", keyFile}, 1, `check control-plane endpoint "127.0.0.1:1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append([]string{"join"}, tt.args...)...)
			if code != tt.code || !strings.Contains(stderr, tt.stderr) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, tt.code, tt.stderr)
			}
			if _, err := os.Stat(node); !os.IsNotExist(err) {
				t.Errorf("a refused join created %s", node)
			}
		})
	}
}

// export creates the directories --out needs, private, and never changes
// the mode of one that exists: /tmp must keep its sticky bit.
func TestCertsExportKeepsExistingDirectories(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if code, _, stderr := runCLI(t, "init", "--root", root, "--skip-phases", "etcd,control-plane,validate,write-manifests"); code != 0 {
		t.Fatalf("init: %s", stderr)
	}
	shared := filepath.Join(dir, "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	cwd := filepath.Join(dir, "cwd")
	if err := os.Mkdir(cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(cwd)
	tests := []struct {
		name string
		out  string
		// modes are the directories' modes after the export.
		modes map[string]os.FileMode
	}{
		{"sticky parent", filepath.Join(shared, "s.bundle"), map[string]os.FileMode{shared: 0o777 | os.ModeSticky}},
		{"relative", "rel.bundle", map[string]os.FileMode{cwd: 0o755}},
		{"missing parents", filepath.Join(shared, "new", "deeper", "s.bundle"), map[string]os.FileMode{
			shared:                                 0o777 | os.ModeSticky,
			filepath.Join(shared, "new"):           0o700,
			filepath.Join(shared, "new", "deeper"): 0o700,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if code, _, stderr := runCLI(t, "certs", "export", "--root", root, "--out", tt.out); code != 0 {
				t.Fatalf("export: code %d, stderr %q", code, stderr)
			}
			for path, want := range tt.modes {
				info, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				if got := info.Mode() & (os.ModePerm | os.ModeSticky); got != want {
					t.Errorf("%s: mode %v, want %v", path, got, want)
				}
			}
		})
	}
}
