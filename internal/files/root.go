package files

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/cyphar/filepath-securejoin/pathrs-lite"
	"golang.org/x/sys/unix"

	"github.com/kubeboot/kubeboot/internal/inputfile"
)

// Resolving node paths under a root. A root is the node's filesystem seen
// from outside (a provisioning image, a lab node), so a symlink in it means
// what it means on the node: an absolute target starts at the root, and ".."
// stops there. Following it on this machine instead would let a symlink
// such as /etc/kubernetes/manifests -> /tmp/out make kubeboot write, chmod
// or remove outside the root. Paths resolve at the time of each operation:
// the root is the node's, and only kubeboot changes it while kubeboot runs.

// readLimit caps each file a writer reads back. The largest kubeboot reads
// back is a manifest, which the kubelet itself caps at this size; the
// kubeconfigs, certificates and keys are far smaller.
const readLimit = inputfile.ManifestLimit

// resolve maps a node path to the path on this machine, every symlink in it
// resolved inside root. An empty root is the node's own filesystem, where
// the node path is the path.
func resolve(root, path string) (string, error) {
	if root == "" {
		return path, nil
	}
	abs, err := absRoot(root)
	if err != nil {
		return "", err
	}
	host, err := securejoin.SecureJoin(abs, path)
	if err != nil {
		return "", fmt.Errorf("resolve %q inside root %q: %w", path, root, err)
	}
	return host, nil
}

// resolveLink is resolve for operations on the path itself rather than on
// what it points to (remove, lchown, rename over): its directory resolves
// inside root, and a symlink as its last element stays the symlink.
func resolveLink(root, path string) (string, error) {
	clean := filepath.Join("/", path)
	if root == "" || clean == "/" {
		return resolve(root, path)
	}
	dir, err := resolve(root, filepath.Dir(clean))
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, filepath.Base(clean)), nil
}

// hostPath is resolve for callers that cannot handle an error. A path that
// does not resolve (a symlink loop, a directory it may not search) maps to
// its plain join under root: every use of it fails the same way.
func hostPath(root, path string) string {
	host, err := resolve(root, path)
	if err != nil {
		return filepath.Join(root, path)
	}
	return host
}

// absRoot is root as an absolute path, which SecureJoin needs to be free
// of "..".
func absRoot(root string) (string, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("resolve root %q: %w", root, err)
	}
	return abs, nil
}

// readFile reads the regular file at a node path, at most readLimit bytes.
// It never opens a device and never blocks on a FIFO. Inside a root the
// file is opened through a handle resolved in the root, so no symlink
// swapped in after resolving leads out of it.
func readFile(root, path string) ([]byte, error) {
	if root == "" {
		return inputfile.Read(path, readLimit)
	}
	abs, err := absRoot(root)
	if err != nil {
		return nil, err
	}
	handle, err := pathrs.OpenInRoot(abs, path)
	if err != nil {
		return nil, openError(root, path, err)
	}
	defer func() { _ = handle.Close() }()
	// The handle opens nothing yet (O_PATH): check it before a device is.
	info, err := handle.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", path, err)
	}
	if !info.Mode().IsRegular() {
		// inputfile refuses it from the handle's stat, naming what it is,
		// before it reads anything.
		_, err := inputfile.ReadFile(handle, path, readLimit)
		return nil, err
	}
	f, err := pathrs.Reopen(handle, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC)
	if err != nil {
		return nil, openError(root, path, err)
	}
	defer func() { _ = f.Close() }()
	return inputfile.ReadFile(f, path, readLimit)
}

// openError says what os.Open would, for the path under root: the resolver's
// own layers of wrapping name the same path three times.
func openError(root, path string, err error) error {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return &fs.PathError{Op: "open", Path: filepath.Join(root, path), Err: errno}
	}
	return fmt.Errorf("open %q inside root %q: %w", path, root, err)
}
