package files

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/inputfile"
)

// Where kubeboot writes a file, something else may already be: a device
// node, a FIFO, a socket or a directory. The atomic write renames a new
// file over the path, so it would replace that thing itself (for example
// the host's /dev/stdout), not write into it. Such a path is refused,
// never replaced.

// checkReplaceable refuses host, the path of a file kubeboot owns, when it
// exists and is neither a regular file nor a symbolic link: a symbolic link
// at a node path is replaced, not followed (see resolveLink).
func checkReplaceable(host, path string) error {
	info, err := os.Lstat(host)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stat %q: %w", host, err)
	}
	if info.Mode().IsRegular() || info.Mode()&fs.ModeSymlink != 0 {
		return nil
	}
	return &exit.UsageError{Msg: fmt.Sprintf("%s is %s, where kubeboot writes a regular file: kubeboot never replaces it; move it away or correct the path that names it, and re-run", path, inputfile.Kind(info.Mode()))}
}

// CheckTarget refuses path, a file a user named with flag (such as --out),
// when it exists and is not a regular file: a device (such as /dev/stdout),
// a FIFO, a socket, a directory or a symbolic link, wherever the link
// points. kubeboot replaces a target file as a whole, so it would replace
// the link or the device node itself instead of writing through it. The
// error is a usage error that names the flag; "-" is stdout.
func CheckTarget(flag, path string) error {
	info, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return &exit.UsageError{Msg: fmt.Sprintf("%s %s: %v", flag, path, err)}
	}
	if info.Mode().IsRegular() {
		return nil
	}
	return &exit.UsageError{Msg: fmt.Sprintf("%s %s: it is %s, and kubeboot writes only onto a new or a regular file, which it replaces as a whole: "+
		"name a new file or a regular one (not a link to it), or - for stdout", flag, path, inputfile.Kind(info.Mode()))}
}

// WriteTarget replaces path, a file a user named with flag, with data and
// mode, atomically, after CheckTarget has accepted it; its directory must
// exist. The path is the user's, not a node path: no root applies to it,
// and its directory is left as it is.
func WriteTarget(flag, path string, data []byte, mode fs.FileMode) error {
	if err := CheckTarget(flag, path); err != nil {
		return err
	}
	if err := (&AtomicWriter{}).replace(path, data, mode); err != nil {
		return fmt.Errorf("%s: write %q: %w", flag, path, err)
	}
	return nil
}

// owner is a file's owner and group.
type owner struct{ uid, gid int }

// running is the owner of the files this process creates: root, on a node.
func running() owner { return owner{os.Geteuid(), os.Getegid()} }

// ownerOf returns the owner of host, not following a last symlink.
func ownerOf(host string) (owner, error) {
	info, err := os.Lstat(host)
	if err != nil {
		return owner{}, fmt.Errorf("stat %q: %w", host, err)
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return owner{}, fmt.Errorf("stat %q: no owner", host)
	}
	return owner{int(st.Uid), int(st.Gid)}, nil
}
