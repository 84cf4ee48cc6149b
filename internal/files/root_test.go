package files

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/internal/output"
)

// escapingRoot is a root whose manifest dir is an absolute symlink to
// another directory, outside, as a careless layout or a hostile one has it.
// outside holds files that a writer confined to root must never touch.
func escapingRoot(t *testing.T) (root, outside string) {
	t.Helper()
	root, outside = t.TempDir(), t.TempDir()
	must(t, os.Chmod(outside, 0o755))
	must(t, os.MkdirAll(filepath.Join(root, "etc/kubernetes"), 0o755))
	must(t, os.Symlink(outside, filepath.Join(root, "etc/kubernetes/manifests")))
	must(t, os.WriteFile(filepath.Join(outside, "victim"), []byte("outside"), 0o644))
	must(t, os.WriteFile(filepath.Join(outside, ".etcd.yaml.tmp-1"), []byte("outside"), 0o644))
	must(t, os.MkdirAll(filepath.Join(outside, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(outside, "sub/file"), []byte("outside"), 0o644))
	return root, outside
}

// fileInfo is what a confined writer must not change about a path.
type fileInfo struct {
	Mode     fs.FileMode
	UID      uint32
	Content  string
	Children int
}

// tree records every path under dir, dir included.
func tree(t *testing.T, dir string) map[string]fileInfo {
	t.Helper()
	out := map[string]fileInfo{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fi := fileInfo{Mode: info.Mode(), UID: info.Sys().(*syscall.Stat_t).Uid}
		if d.IsDir() {
			entries, _ := os.ReadDir(path)
			fi.Children = len(entries)
		} else {
			data, _ := os.ReadFile(path)
			fi.Content = string(data)
		}
		out[strings.TrimPrefix(path, dir)] = fi
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestWritersStayInsideRoot(t *testing.T) {
	const dir = "/etc/kubernetes/manifests"
	tests := []struct {
		name string
		do   func(w Writer, root, outside string) error
		// inRoot, when set, is a node path the operation must have created inside root.
		inRoot string
	}{
		{"write", func(w Writer, _, _ string) error { return w.WriteFile(dir+"/etcd.yaml", []byte("kind: Pod\n"), 0o600) }, dir + "/etcd.yaml"},
		{"write over a file outside", func(w Writer, _, _ string) error { return w.WriteFile(dir+"/victim", []byte("new"), 0o600) }, dir + "/victim"},
		{"mkdir", func(w Writer, _, _ string) error { return w.MkdirAll(dir, 0o700) }, dir},
		{"mkdir below", func(w Writer, _, _ string) error { return w.MkdirAll(dir+"/sub", 0o700) }, dir + "/sub"},
		{"chown", func(w Writer, _, _ string) error {
			if err := w.Chown(dir+"/victim", 4242, 4242); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return nil
		}, ""},
		{"remove", func(w Writer, _, _ string) error { return w.Remove(dir + "/victim") }, ""},
		{"remove all", func(w Writer, _, _ string) error { return w.RemoveAll(dir + "/sub") }, ""},
		{"remove temp files", func(w Writer, _, _ string) error {
			removed, err := RemoveTempFiles(w, dir)
			if len(removed) > 0 {
				return errors.New("removed " + strings.Join(removed, ", "))
			}
			return err
		}, ""},
		{"read", func(w Writer, _, _ string) error {
			if data, err := w.ReadFile(dir + "/victim"); !errors.Is(err, fs.ErrNotExist) {
				return errors.New("read " + string(data) + " from outside the root")
			}
			return nil
		}, ""},
		{"host path", func(w Writer, root, outside string) error {
			if host := w.HostPath(dir + "/victim"); host != filepath.Join(root, outside, "victim") {
				return errors.New(host + " does not resolve the symlink inside the root")
			}
			return nil
		}, ""},
	}
	writers := map[string]func(root string) Writer{
		"atomic": func(root string) Writer { return &AtomicWriter{Root: root} },
		"dry run": func(root string) Writer {
			return &DryRunWriter{Root: root, Report: output.NewReporter(&bytes.Buffer{}, false), Stdout: &bytes.Buffer{}}
		},
	}
	for wname, newWriter := range writers {
		for _, tt := range tests {
			t.Run(wname+"/"+tt.name, func(t *testing.T) {
				root, outside := escapingRoot(t)
				before := tree(t, outside)
				w := newWriter(root)
				if err := tt.do(w, root, outside); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(before, tree(t, outside)); diff != "" {
					t.Errorf("changed a directory outside the root (-before +after):\n%s", diff)
				}
				if _, isAtomic := w.(*AtomicWriter); isAtomic && tt.inRoot != "" {
					// The symlink resolves as if root were /: to outside's path under root.
					if _, err := os.Stat(filepath.Join(root, outside, strings.TrimPrefix(tt.inRoot, dir))); err != nil {
						t.Errorf("%s is not where the node sees it: %v", tt.inRoot, err)
					}
				}
			})
		}
	}
}

// With no root, a writer works on the node's own filesystem, following
// symlinks as every other program there does.
func TestWriterWithoutRootFollowsSymlinks(t *testing.T) {
	dir := t.TempDir()
	target := t.TempDir()
	link := filepath.Join(dir, "manifests")
	must(t, os.Symlink(target, link))
	w := &AtomicWriter{}
	must(t, w.WriteFile(filepath.Join(link, "etcd.yaml"), []byte("x"), 0o600))
	if got, err := os.ReadFile(filepath.Join(target, "etcd.yaml")); err != nil || string(got) != "x" {
		t.Errorf("read %q, %v through the symlink", got, err)
	}
	if got := w.HostPath(link); got != link {
		t.Errorf("HostPath(%s) = %s, want it unchanged", link, got)
	}
}
