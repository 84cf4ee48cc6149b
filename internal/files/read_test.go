package files

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/inputfile"
	"github.com/kubeboot/kubeboot/internal/output"
)

// promptly fails the test when f has not returned within a few seconds, as
// a read blocked on a FIFO never would.
func promptly(t *testing.T, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("blocked for 5s")
		return nil
	}
}

func TestWriterReadsOnlyBoundedRegularFiles(t *testing.T) {
	const dir = "/etc/kubernetes/manifests"
	tests := []struct {
		name string
		// make creates the node path dir/f under host, the root's dir.
		make func(t *testing.T, host string)
		want error
	}{
		{"fifo", func(t *testing.T, host string) { must(t, syscall.Mkfifo(filepath.Join(host, "f"), 0o600)) }, inputfile.ErrNotRegular},
		{"directory", func(t *testing.T, host string) { must(t, os.Mkdir(filepath.Join(host, "f"), 0o700)) }, inputfile.ErrNotRegular},
		{"too large", func(t *testing.T, host string) {
			must(t, os.WriteFile(filepath.Join(host, "f"), nil, 0o600))
			must(t, os.Truncate(filepath.Join(host, "f"), readLimit+1))
		}, inputfile.ErrTooLarge},
		{"symlink to a device", func(t *testing.T, host string) { must(t, os.Symlink("/dev/zero", filepath.Join(host, "f"))) }, nil},
	}
	writers := map[string]func(root string) Writer{
		"atomic": func(root string) Writer { return &AtomicWriter{Root: root} },
		"dry run": func(root string) Writer {
			return &DryRunWriter{Root: root, Report: output.NewReporter(&bytes.Buffer{}, false), Stdout: &bytes.Buffer{}}
		},
	}
	for wname, newWriter := range writers {
		for _, rooted := range []bool{true, false} {
			for _, tt := range tests {
				t.Run(fmt.Sprintf("%s/rooted=%v/%s", wname, rooted, tt.name), func(t *testing.T) {
					root, path := t.TempDir(), dir+"/f"
					host := filepath.Join(root, dir)
					must(t, os.MkdirAll(host, 0o755))
					tt.make(t, host)
					want := tt.want
					if !rooted {
						root, path = "", filepath.Join(host, "f")
					}
					if want == nil {
						// Inside a root, /dev/zero is the root's, which does not exist.
						want = fs.ErrNotExist
						if !rooted {
							want = inputfile.ErrNotRegular
						}
					}
					w := newWriter(root)
					err := promptly(t, func() error { _, err := w.ReadFile(path); return err })
					if !errors.Is(err, want) {
						t.Errorf("rooted %v: ReadFile: got %v, want %v", rooted, err, want)
					}
					if tt.name == "fifo" && !strings.Contains(fmt.Sprint(err), "it is a FIFO") {
						t.Errorf("rooted %v: %v does not say what the file is", rooted, err)
					}
					// Writing over it reads it first, to skip an unchanged file;
					// a FIFO or a directory is then refused, never replaced.
					err = promptly(t, func() error { return w.WriteFile(path, []byte("x"), 0o600) })
					refused := tt.name == "fifo" || tt.name == "directory"
					if refused != strings.Contains(fmt.Sprint(err), "never replaces it") || !refused && err != nil {
						t.Errorf("rooted %v: WriteFile: %v", rooted, err)
					}
				})
			}
		}
	}
}

// TestOpenersAgree checks that both ways of opening a file inside a root,
// openat2's (openInRoot) and the step-by-step one for kernels without it
// (openInRootByStep), resolve and refuse the same paths the same way.
func TestOpenersAgree(t *testing.T) {
	root := t.TempDir()
	host := filepath.Join(root, "etc", "kubernetes")
	must(t, os.MkdirAll(host, 0o700))
	must(t, os.WriteFile(filepath.Join(host, "admin.conf"), []byte("inside"), 0o600))
	outside := filepath.Join(t.TempDir(), "secret")
	must(t, os.WriteFile(outside, []byte("outside"), 0o600))
	// An absolute target starts at the root, ".." stops there.
	must(t, os.Symlink("/etc/kubernetes/admin.conf", filepath.Join(host, "absolute")))
	must(t, os.Symlink("../../../../../../../etc/kubernetes/admin.conf", filepath.Join(host, "dotdot")))
	must(t, os.Symlink(outside, filepath.Join(host, "escape")))
	must(t, syscall.Mkfifo(filepath.Join(host, "fifo"), 0o600))
	tests := []struct {
		path string
		want string // the content read, or the error wanted
		err  error
	}{
		{"/etc/kubernetes/admin.conf", "inside", nil},
		{"/etc/kubernetes/absolute", "inside", nil},
		{"/etc/kubernetes/dotdot", "inside", nil},
		{"/etc/kubernetes/escape", "", fs.ErrNotExist},
		{"/etc/kubernetes/fifo", "", inputfile.ErrNotRegular},
		{"/etc/kubernetes", "", inputfile.ErrNotRegular},
		{"/etc/kubernetes/missing", "", fs.ErrNotExist},
	}
	openers := map[string]func(root, path string) (*os.File, error){"openat2": openInRoot, "by step": openInRootByStep}
	for name, open := range openers {
		for _, tt := range tests {
			t.Run(name+tt.path, func(t *testing.T) {
				f, err := open(root, tt.path)
				if tt.err != nil {
					if !errors.Is(err, tt.err) {
						t.Fatalf("got %v, want %v", err, tt.err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = f.Close() }()
				got, err := inputfile.ReadFile(f, tt.path, readLimit)
				if err != nil || string(got) != tt.want {
					t.Fatalf("read %q, %v; want %q", got, err, tt.want)
				}
			})
		}
	}
}
