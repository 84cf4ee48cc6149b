package lab

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kubeboot/kubeboot/internal/atomicfile"
	"github.com/kubeboot/kubeboot/internal/hostcontainerd"
	"github.com/kubeboot/kubeboot/internal/output"
)

// A node image holds its images already unpacked in containerd's store,
// as kind's does. The lab makes that store once per archive of images:
// the bin dir's containerd, run on this host with a root and a socket of
// its own, imports the archive (kubeboot's image bundle) through the lab's
// `kubeboot images import`, as an air-gapped node loads its images, and
// the store it leaves is cached beside the archive. Every node's
// /var/lib/containerd then starts as a copy of it (preloadNode), made of
// hard links but for the databases containerd writes in place, so no node
// imports the images at its first boot.

// preloadedStore is where the store of archive's images is cached.
func preloadedStore(archive string) string {
	return strings.TrimSuffix(archive, ".tar") + ".containerd"
}

// preload makes the store of archive's images, unless it is cached, and
// returns its directory: the bin dir's containerd imports them, with the
// kubeboot binary's `images import`. Two labs that preload one archive at
// once make it twice, and the later keeps the earlier's.
func preload(ctx context.Context, binDir, kubeboot, archive string) (string, error) {
	store := preloadedStore(archive)
	if _, err := os.Stat(store); err == nil {
		return store, nil
	}
	tmp, err := os.MkdirTemp(filepath.Dir(archive), ".containerd-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
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
		if _, statErr := os.Stat(store); statErr == nil {
			return store, nil // another lab preloaded it meanwhile
		}
		return "", err
	}
	return store, nil
}

// preloadNode lays the preloaded store out as the machine root's
// /var/lib/containerd with `cp -a --link`: directories made anew with
// their owners, modes and extended attributes (an unpacked layer's opaque
// directories carry overlay's), every other file a hard link to the
// store's, since containerd never writes a blob or an unpacked layer in
// place; then the bolt databases, which it does write in place, are
// copied. It marks the node's images loaded, so that its images unit
// does not import them again.
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
	marker := filepath.Join(machineRoot, imagesLoaded)
	if err := os.MkdirAll(filepath.Dir(marker), 0o755); err != nil {
		return err
	}
	return os.WriteFile(marker, nil, 0o644)
}
