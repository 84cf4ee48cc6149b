package lab

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/hostcontainerd"
)

// buildKubeboot builds the kubeboot binary the preload runs, static, into
// dir.
func buildKubeboot(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "kubeboot")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/kubeboot/kubeboot/cmd/kubeboot")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	return bin
}

// TestPreload: the bin dir's containerd, run on this host, makes the
// store of a set of images once, imported from their archive by `kubeboot
// images import`, and the cache keeps the store alone; a second set
// shares the first's identical files as hard links. Each node's copy of a
// store is hard links but for the databases, and a containerd on the
// copy holds the image unpacked, with nothing to import. Nothing of it
// reaches the host outside its directories. A failed import names its
// command and ends with its output, and leaves nothing in the cache; a
// store unused for two hours goes.
func TestPreload(t *testing.T) {
	binDir := os.Getenv("KUBEBOOT_BIN_DIR")
	if _, err := os.Stat(filepath.Join(binDir, "containerd")); binDir == "" || err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the preload needs containerd in KUBEBOOT_BIN_DIR (%q): make binaries", binDir)
		}
		t.Skip("the preload needs containerd in KUBEBOOT_BIN_DIR: make binaries")
	}
	if os.Geteuid() != 0 {
		t.Skip("containerd needs root")
	}
	kubeboot := buildKubeboot(t, t.TempDir())
	hostBefore := hostPaths()
	cache := t.TempDir()
	const ref = "example.com/kubeboot-preload:1"
	busybox := Image{Ref: ref, Trees: []string{filepath.Join(binDir, "rootfs/busybox")}, Cmd: []string{"true"}}
	images := []Image{busybox}

	failing := filepath.Join(t.TempDir(), "kubeboot")
	if err := os.WriteFile(failing, []byte("#!/bin/sh\necho \"$@\"\necho the import failed >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := preloaded(t.Context(), binDir, failing, cache, images)
	archive := regexp.QuoteMeta(cache+"/.containerd-") + `\d+/images\.tar`
	want := regexp.MustCompile(`^preload the lab's images: ` + regexp.QuoteMeta(failing+" images import ") + archive + ` --runtime-endpoint unix://` +
		`[^ ]+/c\.sock: exit status 3: images import ` + archive + ` --runtime-endpoint unix://\S+\nthe import failed$`)
	if err == nil || !want.MatchString(err.Error()) {
		t.Errorf("a failed import: %v; want it to match %s", err, want)
	}
	if left := cacheEntries(t, cache); len(left) != 0 {
		t.Errorf("a failed import left %v in the cache", left)
	}

	store, err := preloaded(t.Context(), binDir, kubeboot, cache, images)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := os.Stat(store)
	if again, err := preloaded(t.Context(), binDir, kubeboot, cache, images); err != nil || again != store {
		t.Errorf("the second preload: %q, %v; want the cached %q", again, err, store)
	}
	if info, _ := os.Stat(store); !os.SameFile(first, info) {
		t.Error("the cached store was made again")
	}
	if left := cacheEntries(t, cache); len(left) != 1 || left[0] != filepath.Base(store) {
		t.Errorf("the cache holds %v, want the store alone", left)
	}

	// A second set, of the first's image and another with the same tree,
	// makes a second store, which shares the first's blobs and unpacked
	// files.
	other := Image{Ref: "example.com/kubeboot-preload:2", Trees: busybox.Trees, Cmd: []string{"false"}}
	second, err := preloaded(t.Context(), binDir, kubeboot, cache, []Image{busybox, other})
	if err != nil || second == store {
		t.Fatalf("a second set: %q, %v; want a store of its own", second, err)
	}
	for _, dir := range []string{"io.containerd.content.v1.content/blobs/sha256", "io.containerd.snapshotter.v1.overlayfs/snapshots"} {
		if shared := sharedFiles(t, filepath.Join(store, dir), filepath.Join(second, dir)); shared == 0 {
			t.Errorf("the stores share no file of %s", dir)
		}
	}

	// Unused for two hours, the first store goes at the next preload, with
	// an archive the cache held before it kept stores alone.
	old := time.Now().Add(-2 * time.Hour)
	stale := filepath.Join(cache, "0123456789abcdef.tar")
	if err := os.WriteFile(stale, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{store, stale} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if again, err := preloaded(t.Context(), binDir, kubeboot, cache, []Image{busybox, other}); err != nil || again != second {
		t.Fatalf("the second set again: %q, %v; want the cached %q", again, err, second)
	}
	if left := cacheEntries(t, cache); len(left) != 1 || left[0] != filepath.Base(second) {
		t.Errorf("after two hours the cache holds %v, want %s alone", left, filepath.Base(second))
	}
	store = second

	nodes := t.TempDir()
	for _, node := range []string{"a", "b"} {
		if err := preloadNode(store, filepath.Join(nodes, node)); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(nodes, "a")
	var blobs, dbs int
	err = filepath.WalkDir(store, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		orig, err := os.Stat(path)
		if err != nil {
			return err
		}
		copied, err := os.Stat(filepath.Join(root, "var/lib/containerd", strings.TrimPrefix(path, store)))
		if err != nil {
			return err
		}
		switch same := os.SameFile(orig, copied); {
		case strings.HasSuffix(path, ".db"):
			dbs++
			if same {
				t.Errorf("%s is the store's own: containerd writes it in place", path)
			}
		case !same:
			t.Errorf("%s is a copy, not a hard link", path)
		default:
			blobs++
		}
		return nil
	})
	if err != nil || blobs == 0 || dbs < 2 {
		t.Fatalf("walk: %v; %d linked files, %d databases", err, blobs, dbs)
	}

	c, err := hostcontainerd.Start(t.Context(), binDir, filepath.Join(root, "var/lib/containerd"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	}()
	if out, err := c.Ctr(t.Context(), "images", "ls", "-q"); err != nil || !strings.Contains(string(out), ref) {
		t.Errorf("the node's containerd lists %q (%v), want %s", out, err, ref)
	}
	if out, err := c.Ctr(t.Context(), "snapshots", "--snapshotter", "overlayfs", "ls"); err != nil || !strings.Contains(string(out), "Committed") {
		t.Errorf("the node's containerd has no unpacked layer: %q, %v", out, err)
	}
	if after := hostPaths(); after != hostBefore {
		t.Errorf("containerd on the host made %s", after)
	}
}

// cacheEntries are the names in the cache, but its lock.
func cacheEntries(t *testing.T, cache string) []string {
	t.Helper()
	entries, err := os.ReadDir(cache)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() != ".lock" {
			names = append(names, e.Name())
		}
	}
	return names
}

// sharedFiles counts the regular files under a that are one file, hard
// linked, with one under b.
func sharedFiles(t *testing.T, a, b string) int {
	t.Helper()
	inodes := map[uint64]bool{}
	walk := func(dir string, visit func(ino uint64)) {
		err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			visit(info.Sys().(*syscall.Stat_t).Ino)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	walk(a, func(ino uint64) { inodes[ino] = true })
	shared := 0
	walk(b, func(ino uint64) {
		if inodes[ino] {
			shared++
		}
	})
	return shared
}

// hostPaths are which of the paths a host containerd makes by default
// exist, and libmount's /run/mount, which a mount over /run could make
// on the host's /run before it covers it.
func hostPaths() string {
	var made []string
	for _, p := range []string{"/opt/containerd", "/run/containerd", "/var/lib/containerd", "/run/nri", "/var/run/nri", "/run/mount"} {
		if _, err := os.Stat(p); !errors.Is(err, syscall.ENOENT) {
			made = append(made, p)
		}
	}
	return strings.Join(made, " ")
}
