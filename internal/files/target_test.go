package files

import (
	"bytes"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/output"
)

// specials are the things that may sit where kubeboot writes a file, each
// made at a path, and the word the refusal names it by.
var specials = []struct {
	name, kind string
	make       func(t *testing.T, path string)
}{
	{"fifo", "a FIFO", func(t *testing.T, path string) { must(t, syscall.Mkfifo(path, 0o600)) }},
	{"char device", "a character device", func(t *testing.T, path string) { mknodNull(t, path) }},
	{"socket", "a socket", func(t *testing.T, path string) {
		l, err := net.Listen("unix", path)
		must(t, err)
		t.Cleanup(func() { _ = l.Close() })
	}},
	{"directory", "a directory", func(t *testing.T, path string) { must(t, os.Mkdir(path, 0o755)) }},
}

// mknodNull makes a character device like /dev/null at path.
func mknodNull(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mknod(path, syscall.S_IFCHR|0o600, 1<<8|3); err != nil {
		t.Fatalf("mknod (the test needs root): %v", err)
	}
}

// typeOf is the type bits of path itself.
func typeOf(t *testing.T, path string) fs.FileMode {
	t.Helper()
	info, err := os.Lstat(path)
	must(t, err)
	return info.Mode().Type()
}

// TestWritersNeverReplaceASpecialFile: a device, FIFO, socket or
// directory where a node file goes is refused with exit 2, by a real run
// and a dry run alike, and stays what it was.
func TestWritersNeverReplaceASpecialFile(t *testing.T) {
	for _, sp := range specials {
		for _, dry := range []bool{false, true} {
			t.Run(sp.name, func(t *testing.T) {
				root := t.TempDir()
				host := filepath.Join(root, "/etc/kubernetes/admin.conf")
				must(t, os.MkdirAll(filepath.Dir(host), 0o755))
				sp.make(t, host)
				before := typeOf(t, host)
				var w Writer = &AtomicWriter{Root: root}
				if dry {
					w = &DryRunWriter{Root: root, Report: output.NewReporter(&bytes.Buffer{}, false), Stdout: &bytes.Buffer{}}
				}
				err := w.WriteFile("/etc/kubernetes/admin.conf", []byte("x"), 0o600)
				if err == nil || !strings.Contains(err.Error(), sp.kind) || exit.Code(err) != exit.Usage {
					t.Errorf("dry run %v: got %v (exit %d), want a usage error naming %s", dry, err, exit.Code(err), sp.kind)
				}
				if after := typeOf(t, host); after != before {
					t.Errorf("dry run %v: the %s became %v", dry, sp.name, after)
				}
			})
		}
	}
}

// TestWriteTargetRefusesAllButRegularFiles: a user's --out that names a
// device, a FIFO, a socket, a directory or any symbolic link is refused,
// naming the flag, and left as it was; a new or regular file is written.
func TestWriteTargetRefusesAllButRegularFiles(t *testing.T) {
	type target struct {
		name, kind string
		make       func(t *testing.T, path string)
	}
	targets := []target{
		{"symlink to a device", "a symbolic link", func(t *testing.T, path string) {
			dev := filepath.Join(filepath.Dir(path), "null")
			mknodNull(t, dev)
			must(t, os.Symlink(dev, path))
		}},
		{"symlink to stdout", "a symbolic link", func(t *testing.T, path string) { must(t, os.Symlink("/proc/self/fd/1", path)) }},
		{"symlink to a regular file", "a symbolic link", func(t *testing.T, path string) {
			must(t, os.WriteFile(path+".real", []byte("old"), 0o600))
			must(t, os.Symlink(path+".real", path))
		}},
	}
	for _, sp := range specials {
		targets = append(targets, target{sp.name, sp.kind, sp.make})
	}
	for _, tt := range targets {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "out")
			tt.make(t, path)
			before := typeOf(t, path)
			err := WriteTarget("--out", path, []byte("x"), 0o600)
			if err == nil || !strings.Contains(err.Error(), "--out "+path+": it is "+tt.kind) || exit.Code(err) != exit.Usage {
				t.Errorf("got %v (exit %d), want a usage error naming --out and %s", err, exit.Code(err), tt.kind)
			}
			if after := typeOf(t, path); after != before {
				t.Errorf("the %s became %v", tt.name, after)
			}
			if data, err := os.ReadFile(path + ".real"); err == nil && string(data) != "old" {
				t.Errorf("the link's target was written: %q", data)
			}
		})
	}
	dir := t.TempDir()
	for _, path := range []string{filepath.Join(dir, "new"), filepath.Join(dir, "regular")} {
		must(t, os.WriteFile(filepath.Join(dir, "regular"), []byte("old"), 0o644))
		must(t, WriteTarget("--out", path, []byte("x"), 0o600))
		if data, err := os.ReadFile(path); err != nil || string(data) != "x" || typeOf(t, path) != 0 || mode(t, path) != 0o600 {
			t.Errorf("%s: %q, %v", path, data, err)
		}
	}
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	info, err := os.Lstat(path)
	must(t, err)
	return info.Mode().Perm()
}

// other is a user who is not the one running the tests.
const other = 1000

// ownerIs reports whether path belongs to uid:gid.
func ownerIs(t *testing.T, path string, uid int) bool {
	t.Helper()
	info, err := os.Lstat(path)
	must(t, err)
	st := info.Sys().(*syscall.Stat_t)
	return int(st.Uid) == uid && int(st.Gid) == uid
}

// TestWriterTakesBackItsFiles: a file kubeboot owns that holds the right
// content but belongs to another user, and a directory of kubeboot's that
// belongs to another user, are given back to the running user (root, on a
// node), and that counts as a change; a dry run says so and changes
// nothing. A directory in KeepOwner keeps its owner.
func TestWriterTakesBackItsFiles(t *testing.T) {
	if os.Geteuid() == other {
		t.Fatalf("run as a user other than %d", other)
	}
	const key, pkiDir, dataDir = "/etc/kubernetes/pki/ca.key", "/etc/kubernetes/pki", "/var/lib/etcd"
	setup := func(t *testing.T) string {
		root := t.TempDir()
		w := &AtomicWriter{Root: root}
		must(t, w.MkdirAll(pkiDir, 0o700))
		must(t, w.MkdirAll(dataDir, 0o700))
		must(t, w.WriteFile(key, []byte("key"), 0o600))
		for _, p := range []string{key, pkiDir, dataDir} {
			must(t, os.Lchown(filepath.Join(root, p), other, other))
		}
		return root
	}
	run := func(w Writer) {
		must(t, w.MkdirAll(pkiDir, 0o700))
		must(t, w.MkdirAll(dataDir, 0o700))
		must(t, w.WriteFile(key, []byte("key"), 0o600))
	}

	root := setup(t)
	var events bytes.Buffer
	dry := &DryRunWriter{Root: root, Report: output.NewReporter(&events, false), Stdout: &bytes.Buffer{}, KeepOwner: []string{dataDir}}
	run(dry)
	for _, p := range []string{key, pkiDir, dataDir} {
		if !ownerIs(t, filepath.Join(root, p), other) {
			t.Errorf("the dry run changed the owner of %s", p)
		}
	}
	if got := dry.Changes().Written; !slices.Equal(got, []string{pkiDir, key}) {
		t.Errorf("dry run: written %v, want the directory and the key", got)
	}
	if !strings.Contains(events.String(), "would set the owner of "+key+" to 0:0 (now 1000:1000)") {
		t.Errorf("the dry run does not say it would set the key's owner: %s", events.String())
	}

	w := &AtomicWriter{Root: root, KeepOwner: []string{dataDir}}
	run(w)
	for _, p := range []string{key, pkiDir} {
		if !ownerIs(t, filepath.Join(root, p), os.Geteuid()) {
			t.Errorf("%s still belongs to another user", p)
		}
	}
	if !ownerIs(t, filepath.Join(root, dataDir), other) {
		t.Errorf("the owner of %s, in KeepOwner, changed", dataDir)
	}
	if got := w.Changes(); !slices.Equal(got.Written, []string{pkiDir, key}) || len(got.Unchanged) != 0 {
		t.Errorf("changes %+v, want the directory and the key written", got)
	}

	again := &AtomicWriter{Root: root, KeepOwner: []string{dataDir}}
	run(again)
	if got := again.Changes(); len(got.Written) != 0 {
		t.Errorf("a converged run wrote %v", got.Written)
	}
}
