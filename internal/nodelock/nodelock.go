// Package nodelock owns the node lock: the one file every kubeboot command
// that changes a node holds while it runs, so that two runs never interleave
// their writes. It is an flock(2), which the kernel drops when the holder
// exits, however it exits: a file left by a killed run never blocks the next.
// The lock belongs to the node, not to a configuration: it is at File under
// the node's root, whatever paths a run's configuration names.
package nodelock

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/cyphar/filepath-securejoin/pathrs-lite"
	"golang.org/x/sys/unix"

	"github.com/kubeboot/kubeboot/internal/exit"
)

// ownerLimit caps what is read of a lock file: a pid and a command line.
const ownerLimit = 64 << 10

// File is the node path of the node lock. It is one fixed place per node,
// whatever the configuration says, so that two runs whose configurations
// differ (in paths.kubeconfigDir, say) still exclude each other. /run is
// where a running system keeps its locks; a reboot empties it, as it ends
// every holder.
const File = "/run/kubeboot/lock"

// HeldError says that another process holds the lock, and which.
type HeldError struct {
	// Path is the lock file.
	Path string
	// PID and Command are what the holder wrote into the lock file; PID is
	// 0 when it had not written them yet.
	PID     int
	Command string
}

// Error names the holder as well as the lock file says it.
func (e *HeldError) Error() string {
	pid, command := "unknown", e.Command
	if e.PID > 0 {
		pid = strconv.Itoa(e.PID)
	}
	if command == "" {
		command = "command unknown"
	}
	return fmt.Sprintf("another kubeboot (pid %s, %s) is changing this node: wait for it to finish (lock %s)", pid, command, e.Path)
}

// Lock is a held node lock.
type Lock struct {
	file *os.File
	// dir is the lock's directory, opened where it resolved inside the
	// root, and dirPath its path on this machine; the file is created and
	// removed through dir by name.
	dir     *os.File
	dirPath string
	name    string
	// created are the directories Acquire made, deepest first; Release
	// removes them when they are empty, so a refused run leaves nothing.
	created []string
}

// attempts bounds Acquire's retries when a releasing holder removes the
// file, or its directory, between this process's steps; each is a few
// system calls.
const attempts = 100

// Acquire takes the lock at path, a node path under root ("" is this
// machine's own filesystem), without waiting, creating the file and its
// directory if needed, and writes this process's pid and command into it.
// Symlinks on the way resolve inside root, and the file itself must be
// kubeboot's: a symlink, anything but a regular file, or a file with
// another hard link is refused and never written. If another process
// holds the lock, Acquire returns a *HeldError at once.
func Acquire(root, path, command string) (*Lock, error) {
	if root == "" {
		root = "/"
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("lock %q: resolve root %q: %w", path, root, err)
	}
	for range attempts {
		l, err := tryAcquire(root, path)
		if err != nil {
			return nil, err
		}
		if l == nil {
			continue
		}
		owner := strconv.Itoa(os.Getpid()) + "\n" + oneLine(command) + "\n"
		err = l.file.Truncate(0)
		if err == nil {
			_, err = l.file.WriteAt([]byte(owner), 0)
		}
		if err != nil {
			_ = l.Release()
			return nil, fmt.Errorf("write lock %q: %w", l.file.Name(), err)
		}
		return l, nil
	}
	return nil, fmt.Errorf("lock %q: the file was replaced %d times in a row", path, attempts)
}

// tryAcquire locks the file at path under root. It returns nil and no
// error when the file was removed or replaced meanwhile, by a holder
// releasing it: the lock then belongs to a file nobody else sees, and the
// caller tries again.
func tryAcquire(root, path string) (*Lock, error) {
	clean := filepath.Join("/", path)
	l := &Lock{name: filepath.Base(clean)}
	var err error
	l.dirPath, l.created, err = mkdirs(root, filepath.Dir(clean))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrExist) {
		return nil, nil // a releasing holder removed a directory meanwhile
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if l.file == nil {
			l.close()
			l.removeDirs()
		}
	}()
	l.dir, err = pathrs.OpenInRoot(root, filepath.Dir(clean))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open lock directory %q under %q: %w", filepath.Dir(clean), root, err)
	}
	host := filepath.Join(l.dirPath, l.name)
	f, err := openLock(l.dir, l.name, host)
	if f == nil || err != nil {
		return nil, err
	}
	if err := flock(f, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer func() { _ = f.Close() }()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, holder(f)
		}
		return nil, fmt.Errorf("lock %q: %w", host, err)
	}
	if same, err := l.named(f); err != nil || !same {
		_ = f.Close()
		return nil, err
	}
	l.file = f
	return l, nil
}

// openLock opens the lock file name in dir, creating it, without
// truncating it and without following a symlink. Something other than a
// regular file there is refused before it is opened, so no device is ever
// opened; a file with another hard link is refused once open, since
// writing to it would write to that other name too, maybe outside the
// root. It returns nil and no error when the file went meanwhile.
func openLock(dir *os.File, name, host string) (*os.File, error) {
	var st unix.Stat_t
	err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, refuse(host, "it is not a regular file (a symbolic link, a device, a FIFO, a socket or a directory)")
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("stat lock %q: %w", host, err)
	}
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if errors.Is(err, unix.ELOOP) {
		return nil, refuse(host, "it is a symbolic link")
	}
	if err != nil {
		return nil, fmt.Errorf("open lock %q: %w", host, err)
	}
	f := os.NewFile(uintptr(fd), host)
	if err := unix.Fstat(fd, &st); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("stat lock %q: %w", host, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		_ = f.Close()
		return nil, refuse(host, "it is not a regular file")
	case st.Nlink > 1:
		_ = f.Close()
		return nil, refuse(host, fmt.Sprintf("it has %d hard links, so another file shares its content", st.Nlink))
	}
	return f, nil
}

// refuse is the error for a lock file that is not kubeboot's.
func refuse(host, why string) error {
	return &exit.UsageError{Msg: fmt.Sprintf("node lock %s: %s: kubeboot writes only a lock file of its own; remove %s and re-run", host, why, host)}
}

// named says whether the locked file f is still the one the lock's name
// names: a holder releasing the lock removes the file while it holds it.
func (l *Lock) named(f *os.File) (bool, error) {
	var locked, named unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &locked); err != nil {
		return false, fmt.Errorf("lock %q: %w", f.Name(), err)
	}
	if err := unix.Fstatat(int(l.dir.Fd()), l.name, &named, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return false, nil
	}
	return named.Dev == locked.Dev && named.Ino == locked.Ino, nil
}

// mkdirs creates dir, a node path, and its missing parents inside root,
// no symlink leading out of it, and returns its path on this machine and
// the paths of those it created, deepest first.
func mkdirs(root, dir string) (string, []string, error) {
	host, err := securejoin.SecureJoin(root, dir)
	if err != nil {
		return "", nil, fmt.Errorf("resolve lock directory %q under %q: %w", dir, root, err)
	}
	var missing []string
	for d := host; d != root && d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		missing = append(missing, d)
	}
	// The path resolved inside root already; the lock's directory is then
	// opened inside root again, so a symlink swapped in meanwhile leads
	// nowhere else.
	if err := os.MkdirAll(host, 0o755); err != nil {
		return "", nil, fmt.Errorf("create lock directory %q: %w", host, err)
	}
	return host, missing, nil
}

// Release gives the lock up and removes the file, then the directories
// Acquire created if they are empty. The file goes first, while still
// locked: a process that opened it meanwhile finds it replaced once it
// gets the lock, and tries again on a new file.
func (l *Lock) Release() error {
	err := unix.Unlinkat(int(l.dir.Fd()), l.name, 0)
	if errors.Is(err, unix.ENOENT) {
		err = nil // removed by reset, with the directory that held it
	}
	// kubeboot's own directory goes when the lock was all it held.
	_ = os.Remove(l.dirPath)
	l.removeDirs()
	if closeErr := l.file.Close(); err == nil {
		err = closeErr
	}
	l.close()
	if err != nil {
		return fmt.Errorf("release lock %q: %w", l.file.Name(), err)
	}
	return nil
}

// close closes the lock's directory.
func (l *Lock) close() {
	if l.dir != nil {
		_ = l.dir.Close()
	}
}

// removeDirs removes the directories Acquire created, deepest first; one
// that a run wrote into stays, as removing it fails.
func (l *Lock) removeDirs() {
	for _, dir := range l.created {
		_ = os.Remove(dir)
	}
}

// flock retries a lock interrupted by a signal.
func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// holder reads who holds the lock from its open file. The holder writes
// its pid right after it locks, so an empty file gets a few short retries.
func holder(f *os.File) error {
	held := &HeldError{Path: f.Name()}
	buf := make([]byte, ownerLimit)
	for range 10 {
		n, _ := f.ReadAt(buf, 0)
		pid, command, _ := strings.Cut(string(bytes.TrimSpace(buf[:n])), "\n")
		if n, err := strconv.Atoi(pid); err == nil && n > 0 {
			held.PID, held.Command = n, command
			return held
		}
		time.Sleep(10 * time.Millisecond)
	}
	return held
}

// oneLine keeps a command line on one line of the lock file.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
