package lab

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kubeboot/kubeboot/internal/atomicfile"
	"github.com/kubeboot/kubeboot/internal/hostcontainerd"
	"github.com/kubeboot/kubeboot/internal/output"
)

// A node image holds its images already unpacked in containerd's store,
// as kind's does. The lab makes that store once per set of images: their
// archive, kubeboot's image bundle (WriteArchive), is imported by the bin
// dir's containerd, run on this host with a root and a socket of its own,
// through the lab's `kubeboot images import`, as an air-gapped node loads
// its images, and the store it leaves is cached in the bin dir; the
// archive is not kept. Every node's /var/lib/containerd then starts as a
// copy of it (preloadNode), made of hard links but for the databases
// containerd writes in place, so no node imports the images at its first
// boot. Sets share most of their images, and so the cache's stores share
// their identical files as hard links too (dedupe).

// storeUnusedFor is how long a store of the cache may go unused before
// preloaded removes it: each new set of binaries makes a new store, which
// would otherwise pile up until the kubelets' disk pressure evicts pods.
const storeUnusedFor = time.Hour

// preloaded returns the store of the images, made unless the cache in
// cacheDir holds it: their archive, written in a temp dir of the cache,
// imported by the bin dir's containerd with the kubeboot binary's `images
// import`. A store is named by archiveKey, so an unchanged set is made
// once and reused. The cache's lock makes one store at a time: labs that
// come up at once make a missing one once, the others wait for it.
func preloaded(ctx context.Context, binDir, kubeboot, cacheDir string, images []Image) (string, error) {
	key, err := archiveKey(images)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("create image cache %q: %w", cacheDir, err)
	}
	lock, err := os.OpenFile(filepath.Join(cacheDir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer func() { _ = lock.Close() }() // closing releases the lock
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock image cache %q: %w", cacheDir, err)
	}
	store := filepath.Join(cacheDir, key+".containerd")
	defer pruneStores(cacheDir, store)
	if _, err := os.Stat(store); err == nil {
		now := time.Now()
		return store, os.Chtimes(store, now, now) // in use: kept
	}
	tmp, err := os.MkdirTemp(cacheDir, ".containerd-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	archive := filepath.Join(tmp, "images.tar")
	if err := WriteArchive(archive, images); err != nil {
		return "", err
	}
	root := filepath.Join(tmp, "root")
	c, err := hostcontainerd.Start(ctx, binDir, root, tmp)
	if err != nil {
		return "", fmt.Errorf("preload the lab's images: %w", err)
	}
	argv := []string{kubeboot, "images", "import", archive, "--runtime-endpoint", c.Endpoint()}
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if stopErr := c.Stop(); err == nil && stopErr != nil {
		return "", fmt.Errorf("preload the lab's images: %w", stopErr)
	}
	if err != nil {
		return "", fmt.Errorf("preload the lab's images: %s: %w: %s", strings.Join(argv, " "), err, output.LastLines(string(out), 10))
	}
	if err := atomicfile.Move(root, store); err != nil {
		return "", err
	}
	if err := dedupe(cacheDir); err != nil {
		return "", fmt.Errorf("preload the lab's images: %w", err)
	}
	return store, nil
}

// dedupe makes the identical files of the cache's stores one file, hard
// linked, with util-linux's hardlink: the blobs of containerd's content
// store by their names, which are their digests, and the files of the
// unpacked layers by their bytes, mode, owner, time and extended
// attributes. containerd writes neither in place (see preloadNode).
func dedupe(cacheDir string) error {
	for _, dir := range []struct {
		glob string
		args []string
	}{
		{"*.containerd/io.containerd.content.v1.content/blobs/sha256", []string{"--respect-name", "--ignore-time"}},
		{"*.containerd/io.containerd.snapshotter.v1.overlayfs/snapshots", nil},
	} {
		dirs, _ := filepath.Glob(filepath.Join(cacheDir, dir.glob))
		if len(dirs) < 2 {
			continue
		}
		argv := slices.Concat([]string{"hardlink", "--quiet", "--respect-xattrs"}, dir.args, dirs)
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, output.LastLines(string(out), 5))
		}
	}
	return nil
}

// pruneStores removes the cache's stores, but keep, that were last used
// (made or reused) more than storeUnusedFor ago, and what a make left
// unfinished as long ago (its temp dir, .containerd-*), with the archives
// the cache held before it kept stores alone (*.tar, .*.tar.tmp-*). It is
// best effort: a failure leaves them for the next run.
func pruneStores(cacheDir, keep string) {
	var old []string
	for _, glob := range []string{"*.containerd", ".containerd-*", "*.tar", ".*.tar.tmp-*"} {
		matches, _ := filepath.Glob(filepath.Join(cacheDir, glob))
		old = append(old, matches...)
	}
	for _, path := range old {
		if info, err := os.Stat(path); err == nil && path != keep && time.Since(info.ModTime()) > storeUnusedFor {
			_ = os.RemoveAll(path)
		}
	}
}

// preloadNode lays the preloaded store out as the machine root's
// /var/lib/containerd with `cp -a --link`: directories made anew with
// their owners, modes and extended attributes (an unpacked layer's opaque
// directories carry overlay's), every other file a hard link to the
// store's, since containerd never writes a blob or an unpacked layer in
// place; then the bolt databases, which it does write in place, are
// copied.
func preloadNode(store, machineRoot string) error {
	dst := filepath.Join(machineRoot, "var/lib/containerd")
	if err := os.MkdirAll(dst, 0o711); err != nil {
		return err
	}
	if out, err := exec.Command("cp", "-a", "--link", store+"/.", dst).CombinedOutput(); err != nil {
		return fmt.Errorf("preload the images of %s: cp: %w: %s", machineRoot, err, output.LastLines(string(out), 5))
	}
	err := filepath.WalkDir(store, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || !strings.HasSuffix(path, ".db") {
			return err
		}
		target := filepath.Join(dst, strings.TrimPrefix(path, store))
		if err := os.Remove(target); err != nil {
			return err
		}
		if out, err := exec.Command("cp", "-a", path, target).CombinedOutput(); err != nil {
			return fmt.Errorf("cp: %w: %s", err, output.LastLines(string(out), 5))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("preload the images of %s: %w", machineRoot, err)
	}
	return nil
}
