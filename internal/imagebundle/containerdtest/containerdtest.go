// Package containerdtest runs the real containerd for tests: the
// containerd and ctr that test/tools built, run as the lab's preload runs
// it (package hostcontainerd); and ctr against it.
package containerdtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/hostcontainerd"
)

// Containerd is a running containerd (hostcontainerd's), with the
// helpers of tests that read what it holds.
type Containerd struct {
	*hostcontainerd.Containerd
	// Root is its store: content, metadata and snapshots.
	Root string
	// BinDir holds its binaries and ctr.
	BinDir string
	// PID is containerd's process.
	PID int
}

// BinDir is the directory of containerd and ctr: $KUBEBOOT_BIN_DIR, else
// test/tools/bin of the module the test runs in. A missing binary, or a
// user other than root, skips the test, and fails it under CI.
func BinDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("KUBEBOOT_BIN_DIR")
	if dir == "" {
		dir = filepath.Join(moduleRoot(t), "test", "tools", "bin")
	}
	for _, bin := range []string{"containerd", "ctr"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			skipOrFail(t, fmt.Sprintf("%s is missing (%v): build it with `make binaries`, or set KUBEBOOT_BIN_DIR", bin, err))
		}
	}
	if os.Geteuid() != 0 {
		skipOrFail(t, "containerd needs root (its own mount namespace, overlay mounts)")
	}
	return dir
}

// skipOrFail skips the test, or fails it under CI, which has what it needs.
func skipOrFail(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// moduleRoot is the nearest directory above the test's own that holds a
// go.mod.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// Start runs containerd until the test ends and waits until it answers.
func Start(t testing.TB) *Containerd {
	t.Helper()
	binDir := BinDir(t)
	scratch := t.TempDir()
	root := filepath.Join(scratch, "root")
	hc, err := hostcontainerd.Start(context.Background(), binDir, root, scratch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := hc.Stop(); err != nil {
			t.Error(err)
		}
	})
	return &Containerd{Containerd: hc, Root: root, BinDir: binDir, PID: hc.PID()}
}

// Ctr runs ctr against the containerd in the k8s.io namespace and returns
// its output; a failure fails the test.
func (c *Containerd) Ctr(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := c.Containerd.Ctr(ctx, args...)
	if err != nil {
		t.Fatalf("ctr %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Images are the names of the images in the k8s.io namespace, sorted.
func (c *Containerd) Images(t testing.TB) []string { return c.list(t, "images", "ls", "-q") }

// Content are the digests of the blobs in the content store, sorted.
func (c *Containerd) Content(t testing.TB) []string { return c.list(t, "content", "ls", "-q") }

// Snapshots are the keys of the default snapshotter's snapshots, sorted.
func (c *Containerd) Snapshots(t testing.TB) []string { return c.list(t, "snapshots", "ls") }

// list is ctr's output as sorted lines.
func (c *Containerd) list(t testing.TB, args ...string) []string {
	t.Helper()
	var lines []string
	for _, line := range strings.Split(c.Ctr(t, args...), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			lines = append(lines, line)
		}
	}
	slices.Sort(lines)
	return lines
}
