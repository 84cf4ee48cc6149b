package files

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kubeboot/kubeboot/internal/output"
)

// TestRename: a directory moves under the root, the move is recorded, a
// target that exists is refused and left as it was, and a dry run moves
// nothing.
func TestRename(t *testing.T) {
	root := t.TempDir()
	w := &AtomicWriter{Root: root}
	if err := os.MkdirAll(filepath.Join(root, "var/lib/etcd.restoring/member"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := w.Rename("/var/lib/etcd.restoring", "/var/lib/etcd"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "var/lib/etcd/member")); err != nil {
		t.Errorf("after the move: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "var/lib/etcd.restoring")); !os.IsNotExist(err) {
		t.Errorf("the source is still there: %v", err)
	}
	if !slices.Contains(w.Changes().Written, "/var/lib/etcd") {
		t.Errorf("changes %+v lack the move", w.Changes())
	}
	if err := os.MkdirAll(filepath.Join(root, "var/lib/other"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := w.Rename("/var/lib/other", "/var/lib/etcd"); err == nil {
		t.Error("a move onto an existing path succeeded")
	}
	if _, err := os.Stat(filepath.Join(root, "var/lib/etcd/member")); err != nil {
		t.Errorf("the refused move changed the target: %v", err)
	}

	dry := &DryRunWriter{Root: root, Report: output.NewReporter(io.Discard, false)}
	if err := dry.Rename("/var/lib/other", "/var/lib/moved"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "var/lib/other")); err != nil {
		t.Errorf("a dry run moved the source: %v", err)
	}
}
