package files

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
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
// path resolves in the root (openInRoot), so no symlink swapped in after
// resolving leads out of it.
func readFile(root, path string) ([]byte, error) {
	if root == "" {
		return inputfile.Read(path, readLimit)
	}
	f, err := openInRoot(root, path)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EAGAIN) {
		// A kernel without openat2 (before 5.6), a seccomp profile that
		// refuses it, or a rename racing the lookup: resolve step by step.
		f, err = openInRootByStep(root, path)
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return inputfile.ReadFile(f, path, readLimit)
}

// inRoot resolves a path as the node would: ".." stops at the root, an
// absolute symlink starts there, and no /proc magic link leads out.
const inRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// openInRoot opens the file at a node path inside root for reading with
// openat2, the kernel resolving it in the root, as inputfile.Open opens
// one outside a root: an O_PATH handle, which opens nothing, is checked
// first, so a device or FIFO is refused before it is opened;
// inputfile.ReadFile checks the open file again.
func openInRoot(root, path string) (*os.File, error) {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	defer func() { _ = unix.Close(dir) }()
	handle, err := unix.Openat2(dir, path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: inRoot})
	if err != nil {
		return nil, openError(root, path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(handle, &st); err != nil {
		_ = unix.Close(handle)
		return nil, fmt.Errorf("read %q: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		// Rarely: the handle as an *os.File, whose Stat says what it is.
		// Every read making one cost the unchanged writer a tenth of its
		// time (BenchmarkAtomicWriterUnchanged).
		h := os.NewFile(uintptr(handle), path)
		defer func() { _ = h.Close() }()
		info, err := h.Stat()
		if err != nil {
			return nil, fmt.Errorf("read %q: %w", path, err)
		}
		return nil, inputfile.NotRegular(path, info.Mode())
	}
	_ = unix.Close(handle)
	fd, err := unix.Openat2(dir, path, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC, Resolve: inRoot})
	if err != nil {
		return nil, openError(root, path, err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(root, path)), nil
}

// openInRootByStep is openInRoot for a kernel without openat2:
// pathrs-lite resolves the path one step at a time and reopens the
// checked handle through /proc.
func openInRootByStep(root, path string) (*os.File, error) {
	abs, err := absRoot(root)
	if err != nil {
		return nil, err
	}
	handle, err := pathrs.OpenInRoot(abs, path)
	if err != nil {
		return nil, openError(root, path, err)
	}
	defer func() { _ = handle.Close() }()
	info, err := handle.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", path, err)
	}
	if !info.Mode().IsRegular() {
		return nil, inputfile.NotRegular(path, info.Mode())
	}
	f, err := pathrs.Reopen(handle, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC)
	if err != nil {
		return nil, openError(root, path, err)
	}
	return f, nil
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
