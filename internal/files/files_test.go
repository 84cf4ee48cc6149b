package files

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/internal/output"
)

func TestAtomicWriterModesIgnoreUmask(t *testing.T) {
	for _, umask := range []int{0o000, 0o077} {
		old := syscall.Umask(umask)
		t.Cleanup(func() { syscall.Umask(old) })
		root := t.TempDir()
		w := &AtomicWriter{Root: root}
		for _, mode := range []fs.FileMode{0o600, 0o644, 0o755} {
			path := filepath.Join("/etc/kubernetes", mode.String())
			if err := w.WriteFile(path, []byte("x"), mode); err != nil {
				t.Fatal(err)
			}
			info, err := os.Stat(filepath.Join(root, path))
			if err != nil {
				t.Fatal(err)
			}
			if info.Mode().Perm() != mode {
				t.Errorf("umask %04o: mode %v, want %v", umask, info.Mode().Perm(), mode)
			}
		}
		if err := w.MkdirAll("/etc/kubernetes/pki", 0o700); err != nil {
			t.Fatal(err)
		}
		if info, _ := os.Stat(filepath.Join(root, "/etc/kubernetes/pki")); info.Mode().Perm() != 0o700 {
			t.Errorf("umask %04o: dir mode %v, want 0700", umask, info.Mode().Perm())
		}
		syscall.Umask(old)
	}
}

func TestAtomicWriterSkipsUnchangedFile(t *testing.T) {
	root := t.TempDir()
	w := &AtomicWriter{Root: root}
	host := filepath.Join(root, "/m/etcd.yaml")
	if err := w.WriteFile("/m/etcd.yaml", []byte("v1"), 0o600); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(host, past, past); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(host)
	if err := os.Chmod(host, 0o666); err != nil { // a looser mode must be tightened
		t.Fatal(err)
	}
	if err := w.WriteFile("/m/etcd.yaml", []byte("v1"), 0o600); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(host)
	if !after.ModTime().Equal(past) || !os.SameFile(before, after) {
		t.Errorf("unchanged file was rewritten: mtime %v -> %v", past, after.ModTime())
	}
	if after.Mode().Perm() != 0o600 {
		t.Errorf("loose mode not tightened: %v", after.Mode().Perm())
	}
	if err := w.WriteFile("/m/etcd.yaml", []byte("v2"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := Changes{Written: []string{"/m/etcd.yaml", "/m/etcd.yaml"}, Unchanged: []string{"/m/etcd.yaml"}}
	if diff := cmp.Diff(want, w.Changes()); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
}

func TestAtomicWriterInjectedFailureLeavesOldFile(t *testing.T) {
	for _, step := range []string{"write", "chmod", "sync", "close", "rename"} {
		t.Run(step, func(t *testing.T) {
			root := t.TempDir()
			w := &AtomicWriter{Root: root}
			if err := w.WriteFile("/m/a.yaml", []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
			injected := errors.New("injected")
			w.BeforeStep = func(name string) error {
				if name == step {
					return injected
				}
				return nil
			}
			if err := w.WriteFile("/m/a.yaml", []byte("new"), 0o600); !errors.Is(err, injected) {
				t.Fatalf("got %v, want the injected failure", err)
			}
			entries, _ := os.ReadDir(filepath.Join(root, "/m"))
			if len(entries) != 1 || entries[0].Name() != "a.yaml" {
				t.Errorf("directory holds %v, want only a.yaml", entries)
			}
			if got, _ := os.ReadFile(filepath.Join(root, "/m/a.yaml")); string(got) != "old" {
				t.Errorf("content %q, want the old one", got)
			}
		})
	}
}

func TestRemoveTempFiles(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "m")
	for _, name := range []string{".etcd.yaml.tmp-123", "etcd.yaml", ".keep"} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := RemoveTempFiles(&AtomicWriter{Root: root}, "/m")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/m/.etcd.yaml.tmp-123"}, removed); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("left %v, want .keep and etcd.yaml", entries)
	}
}

func TestDryRunWritesNothing(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "/etc/kubernetes/manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "/etc/kubernetes/manifests/etcd.yaml"), []byte("same\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var events, stdout bytes.Buffer
	w := &DryRunWriter{Root: root, Report: output.NewReporter(&events, false), Stdout: &stdout, Manifests: []string{"/etc/kubernetes/manifests/kube-apiserver.yaml", "/etc/kubernetes/manifests/etcd.yaml"}}
	must(t, w.MkdirAll("/etc/kubernetes/pki", 0o700))
	must(t, w.WriteFile("/etc/kubernetes/pki/ca.crt", []byte("cert"), 0o644))
	must(t, w.WriteFile("/etc/kubernetes/manifests/kube-apiserver.yaml", []byte("kind: Pod\n"), 0o600))
	must(t, w.WriteFile("/etc/kubernetes/manifests/etcd.yaml", []byte("same\n"), 0o600))
	must(t, w.Remove("/etc/kubernetes/manifests/etcd.yaml"))
	must(t, w.Chown("/var/lib/etcd", 998, 997))

	var files []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, _ error) error {
		if !d.IsDir() {
			files = append(files, strings.TrimPrefix(p, root))
		}
		return nil
	})
	if diff := cmp.Diff([]string{"/etc/kubernetes/manifests/etcd.yaml"}, files); diff != "" {
		t.Errorf("dry run touched the disk (-want +got):\n%s", diff)
	}
	if got, _ := w.ReadFile("/etc/kubernetes/pki/ca.crt"); string(got) != "cert" {
		t.Errorf("later phases must read what the dry run would write, got %q", got)
	}
	if _, err := w.ReadFile("/etc/kubernetes/manifests/etcd.yaml"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a removed file must read as missing, got %v", err)
	}
	wantEvents := "would write /etc/kubernetes/pki/ca.crt (0644, 4 bytes)\n" +
		"would write /etc/kubernetes/manifests/kube-apiserver.yaml (0600, 10 bytes)\n" +
		"unchanged /etc/kubernetes/manifests/etcd.yaml (0600, 5 bytes)\n" +
		"would remove /etc/kubernetes/manifests/etcd.yaml\n" +
		"would set the owner of /var/lib/etcd to 998:997\n"
	if diff := cmp.Diff(wantEvents, events.String()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	wantStdout := "---\n# /etc/kubernetes/manifests/kube-apiserver.yaml\nkind: Pod\n---\n# /etc/kubernetes/manifests/etcd.yaml\nsame\n"
	if diff := cmp.Diff(wantStdout, stdout.String()); diff != "" {
		t.Errorf("stdout must carry exactly the manifests (-want +got):\n%s", diff)
	}
}

func TestDryRunJSONCarriesManifestContent(t *testing.T) {
	var events, stdout bytes.Buffer
	w := &DryRunWriter{Root: t.TempDir(), Report: output.NewReporter(&events, true), Stdout: &stdout, Manifests: []string{"/m/etcd.yaml"}}
	must(t, w.WriteFile("/m/etcd.yaml", []byte("kind: Pod\n"), 0o600))
	var e map[string]any
	if err := json.Unmarshal(events.Bytes(), &e); err != nil {
		t.Fatalf("not one JSON object: %q: %v", events.String(), err)
	}
	for k, want := range map[string]any{"path": "/m/etcd.yaml", "mode": "0600", "size": float64(10), "content": "kind: Pod\n", "level": "info", "dryRun": true} {
		if e[k] != want {
			t.Errorf("%s = %v, want %v", k, e[k], want)
		}
	}
	if _, ok := e["time"]; !ok {
		t.Error("event has no time")
	}
	if stdout.Len() != 0 {
		t.Errorf("JSON mode printed raw manifests: %q", stdout.String())
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestMkdirLeavesExistingParents(t *testing.T) {
	const sticky = 0o777 | fs.ModeSticky
	tests := []struct {
		name  string
		mkdir func(w *AtomicWriter, path string) error
		// want are the modes of parent/a and parent/a/b.
		want [2]fs.FileMode
	}{
		{"MkdirAll", func(w *AtomicWriter, path string) error { return w.MkdirAll(path, 0o700) }, [2]fs.FileMode{0o755, 0o700}},
		{"MkdirMissing", func(w *AtomicWriter, path string) error { return w.MkdirMissing(path, 0o700) }, [2]fs.FileMode{0o700, 0o700}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := syscall.Umask(0o022)
			t.Cleanup(func() { syscall.Umask(old) })
			parent := t.TempDir()
			must(t, os.Chmod(parent, sticky))
			must(t, tt.mkdir(&AtomicWriter{}, filepath.Join(parent, "a", "b")))
			for path, want := range map[string]fs.FileMode{parent: sticky, filepath.Join(parent, "a"): tt.want[0], filepath.Join(parent, "a", "b"): tt.want[1]} {
				info, err := os.Stat(path)
				must(t, err)
				if got := info.Mode() & (fs.ModePerm | fs.ModeSticky); got != want {
					t.Errorf("%s: mode %v, want %v", path, got, want)
				}
			}
			// A second call finds everything there and changes nothing.
			must(t, os.Chmod(filepath.Join(parent, "a"), 0o711))
			must(t, tt.mkdir(&AtomicWriter{}, filepath.Join(parent, "a", "b")))
			if info, _ := os.Stat(filepath.Join(parent, "a")); info.Mode().Perm() != 0o711 {
				t.Errorf("an existing parent changed to %v", info.Mode().Perm())
			}
		})
	}
}
