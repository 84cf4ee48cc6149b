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
// store of an archive's images once, imported by `kubeboot images
// import`; each node's copy of it is hard links but for the databases,
// marks the node's images loaded, and a containerd on the copy holds the
// image unpacked, with nothing to import. Nothing of it reaches the host
// outside its directories. A failed import names its command and ends
// with its output, and leaves no store.
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
	archive, err := Archive(cache, []Image{{Ref: ref, Trees: []string{filepath.Join(binDir, "rootfs/busybox")}, Cmd: []string{"true"}}})
	if err != nil {
		t.Fatal(err)
	}

	failing := filepath.Join(t.TempDir(), "kubeboot")
	if err := os.WriteFile(failing, []byte("#!/bin/sh\necho \"$@\"\necho the import failed >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = preload(t.Context(), binDir, failing, archive)
	want := regexp.MustCompile(`^preload the lab's images: ` + regexp.QuoteMeta(failing+" images import "+archive+" --runtime-endpoint unix://") +
		`[^ ]+/c\.sock: exit status 3: images import ` + regexp.QuoteMeta(archive) + ` --runtime-endpoint unix://\S+\nthe import failed$`)
	if err == nil || !want.MatchString(err.Error()) {
		t.Errorf("a failed import: %v; want it to match %s", err, want)
	}
	if _, err := os.Stat(preloadedStore(archive)); err == nil {
		t.Error("a failed import left a store")
	}

	store, err := preload(t.Context(), binDir, kubeboot, archive)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := preload(t.Context(), binDir, kubeboot, archive); err != nil || again != store {
		t.Errorf("the second preload: %q, %v; want the cached %q", again, err, store)
	}
	if left, _ := filepath.Glob(filepath.Join(cache, ".containerd-*")); len(left) != 0 {
		t.Errorf("the preload left %v", left)
	}

	nodes := t.TempDir()
	for _, node := range []string{"a", "b"} {
		if err := preloadNode(store, filepath.Join(nodes, node)); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(nodes, "a")
	if _, err := os.Stat(filepath.Join(root, imagesLoaded)); err != nil {
		t.Errorf("the node's images are not marked loaded: %v", err)
	}
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
