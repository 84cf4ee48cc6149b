// Package inputfile owns reading the files users hand kubeboot (configs,
// patches, bundles, keys, manifests to validate) safely: only regular
// files, never more than a stated limit, and without blocking on a FIFO or
// a device; and, for YAML and JSON, refusing before any decoder runs a
// document with more nodes than a stated limit, so that decoding fits in
// bounded memory. Its product code imports only the standard library, so
// any package can use it.
package inputfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// The input limits. Each is far above any legitimate file of its kind and
// far below what would exhaust memory, so a careless path (a log, an image,
// /dev/zero behind a symlink) fails at once with a clear error.
const (
	// ConfigLimit caps a configuration file. A generous config with
	// hundreds of SANs, extra args and kubelet settings is a few tens of
	// KiB; 4 MiB leaves two orders of magnitude of room while keeping the
	// YAML decoder's memory, several times the input, modest.
	ConfigLimit = 4 << 20
	// ManifestLimit caps a static pod manifest: 10 MiB is the kubelet's
	// own cap on a file in its manifest directory, so a larger one would
	// never run anyway.
	ManifestLimit = 10 << 20
	// PatchLimit caps one patch file. Patches change a few fields of a pod
	// whose whole manifest is a few KiB; 1 MiB is ample and bounds the cost
	// of a strategic merge.
	PatchLimit = 1 << 20
	// BundleLimit caps a certificate bundle. It holds a few CAs, their keys,
	// the service-account key pair and the encryption configuration: tens
	// of KiB even with RSA-4096 keys, so 16 MiB only guards against the
	// wrong file.
	BundleLimit = 16 << 20
	// KeyLimit caps a key file, such as the bundle key (64 hex digits and
	// a newline). 4 KiB fits any PEM private key kubeboot supports, up to
	// RSA-4096 (about 3.3 KiB).
	KeyLimit = 4 << 10
	// PEMLimit caps a certificate or CA file read for TLS. A CA file may be
	// a bundle of many certificates (an external etcd's chain); 1 MiB holds
	// hundreds of them.
	PEMLimit = 1 << 20
	// SnapshotLimit caps an etcd snapshot, which is streamed, never read
	// into memory: etcd's largest advised backend quota is 8 GiB, and a
	// snapshot is its database and a 32-byte hash, so 16 GiB leaves room
	// while refusing an image or a disk by mistake.
	SnapshotLimit = 16 << 30
)

// ErrNotRegular is wrapped by the error for a path that is not a regular
// file (a FIFO, a device, a directory, a socket).
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is wrapped by the error for a file larger than its limit.
var ErrTooLarge = errors.New("file too large")

// Read returns the contents of the regular file at path, which must hold
// at most limit bytes. A symlink to a regular file is followed. Anything
// else is an error naming the path and what it is, returned without reading
// and without blocking: the path is checked before it is opened, so a
// device is never opened, and it is opened non-blocking, so a FIFO
// swapped in after the check cannot hang the open.
func Read(path string, limit int64) ([]byte, error) {
	f, err := Open(path, limit)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return ReadFile(f, path, limit)
}

// Open opens the regular file at path for reading, checked as Read checks
// it (at most limit bytes, a symlink to a regular file followed, never a
// device opened nor a FIFO waited on), for a file too large to read into
// memory, which the caller streams. The open file is checked again, so a
// path replaced after the first check is refused too. The caller closes
// the file.
func Open(path string, limit int64) (*os.File, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := check(path, info, limit); err != nil {
		return nil, err
	}
	// O_NOCTTY: a terminal device must not become our controlling terminal.
	// os.OpenFile adds O_CLOEXEC. O_NONBLOCK has no effect on a regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	if info, err = f.Stat(); err == nil {
		err = check(path, info, limit)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// ReadFile is Read for a file the caller has already opened, for example
// inside a root directory; name is the path errors give. It checks the
// open file itself, so it cannot be fooled by a path replaced after the
// open. The caller should open with O_NONBLOCK, because opening a FIFO
// without it blocks before ReadFile can refuse it. ReadFile does not close f.
func ReadFile(f *os.File, name string, limit int64) ([]byte, error) {
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", name, err)
	}
	if err := check(name, info, limit); err != nil {
		return nil, err
	}
	// The size can be wrong (files under /proc say 0) or grow after the
	// stat: read one byte past the limit to tell.
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", name, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("read %q: %w: more than %s", name, ErrTooLarge, size(limit))
	}
	return data, nil
}

// check refuses a file that is not regular or is known to be too large.
func check(name string, info fs.FileInfo, limit int64) error {
	if !info.Mode().IsRegular() {
		return NotRegular(name, info.Mode())
	}
	if info.Size() > limit {
		return fmt.Errorf("read %q: %w: %d bytes, the limit is %s", name, ErrTooLarge, info.Size(), size(limit))
	}
	return nil
}

// NotRegular is the error for reading name, a file of mode m that is not
// regular: it wraps ErrNotRegular and says what the file is.
func NotRegular(name string, m fs.FileMode) error {
	return fmt.Errorf("read %q: %w: it is %s", name, ErrNotRegular, Kind(m))
}

// Kind names a non-regular file type for a user, as "a FIFO (named pipe)".
func Kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO (named pipe)"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	default:
		return "a special file (" + m.Type().String() + ")"
	}
}

// size prints a limit in the unit it was chosen in, and in bytes.
func size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB (%d bytes)", n>>20, n)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB (%d bytes)", n>>10, n)
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}
