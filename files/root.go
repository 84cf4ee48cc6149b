package files

import (
	"fmt"
	"path/filepath"

	securejoin "github.com/cyphar/filepath-securejoin"
)

// Resolving node paths under a root. A root is the node's filesystem seen
// from outside (a provisioning image, a lab node), so a symlink in it means
// what it means on the node: an absolute target starts at the root, and ".."
// stops there. Following it on this machine instead would let a symlink
// such as /etc/kubernetes/manifests -> /tmp/out make kubeboot write, chmod
// or remove outside the root. Paths resolve at the time of each operation:
// the root is the node's, and only kubeboot changes it while kubeboot runs.

// resolve maps a node path to the path on this machine, every symlink in it
// resolved inside root. An empty root is the node's own filesystem, where
// the node path is the path.
func resolve(root, path string) (string, error) {
	if root == "" {
		return path, nil
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("resolve root %q: %w", root, err)
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
