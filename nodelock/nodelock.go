// Package nodelock owns the node lock: the one file every kubeboot command
// that changes a node holds while it runs, so that two runs never interleave
// their writes. It is an flock(2), which the kernel drops when the holder
// exits, however it exits: a file left by a killed run never blocks the next.
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

	"golang.org/x/sys/unix"

	"github.com/kubeboot/kubeboot/inputfile"
)

// ownerLimit caps what is read of a lock file: a pid and a command line.
const ownerLimit = 64 << 10

// Path is the node path of the lock file of a node whose kubeconfig
// directory is kubeconfigDir. Map it to this machine with the run's
// files.Writer, which keeps it inside --root.
func Path(kubeconfigDir string) string {
	return filepath.Join(kubeconfigDir, "kubeboot", "lock")
}

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
	// created are the directories Acquire made, deepest first; Release
	// removes them when they are empty, so a refused run leaves nothing.
	created []string
}

// attempts bounds Acquire's retries when a releasing holder removes the
// file, or its directory, between this process's steps; each is a few
// system calls.
const attempts = 100

// Acquire takes the lock at path without waiting, creating the file and
// its directory if needed, and writes this process's pid and command into
// it. If another process holds it, Acquire returns a *HeldError at once.
func Acquire(path, command string) (*Lock, error) {
	for range attempts {
		l, err := tryAcquire(path)
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
			return nil, fmt.Errorf("write lock %q: %w", path, err)
		}
		return l, nil
	}
	return nil, fmt.Errorf("lock %q: the file was replaced %d times in a row", path, attempts)
}

// tryAcquire locks the file at path. It returns nil and no error when the
// file was removed or replaced meanwhile, by a holder releasing it: the lock
// then belongs to a file nobody else sees, and the caller tries again.
func tryAcquire(path string) (*Lock, error) {
	created, err := mkdirs(filepath.Dir(path))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrExist) {
		return nil, nil // a releasing holder removed a directory meanwhile
	}
	if err != nil {
		return nil, err
	}
	l := &Lock{created: created}
	defer func() {
		if l.file == nil {
			l.removeDirs()
		}
	}()
	// O_NOFOLLOW: a symlink planted at the lock's path must not send the
	// pid and command line into another file.
	l.file, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open lock %q: %w", path, err)
	}
	unlocked := func() { _ = l.file.Close(); l.file = nil }
	if err := flock(l.file, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unlocked()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, holder(path)
		}
		return nil, fmt.Errorf("lock %q: %w", path, err)
	}
	var locked, named unix.Stat_t
	if err := unix.Fstat(int(l.file.Fd()), &locked); err != nil {
		unlocked()
		return nil, fmt.Errorf("lock %q: %w", path, err)
	}
	if err := unix.Lstat(path, &named); err != nil || named.Dev != locked.Dev || named.Ino != locked.Ino {
		unlocked()
		return nil, nil
	}
	return l, nil
}

// mkdirs creates dir and its missing parents and returns those it
// created, deepest first.
func mkdirs(dir string) ([]string, error) {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		missing = append(missing, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create lock directory %q: %w", dir, err)
	}
	return missing, nil
}

// Release gives the lock up and removes the file, then the directories
// Acquire created if they are empty. The file goes first, while still
// locked: a process that opened it meanwhile finds it replaced once it
// gets the lock, and tries again on a new file.
func (l *Lock) Release() error {
	err := os.Remove(l.file.Name())
	if errors.Is(err, fs.ErrNotExist) {
		err = nil // removed by reset, with the directory that held it
	}
	// kubeboot's own directory goes when the lock was all it held, as
	// after a reset, which leaves the lock it holds to this release.
	_ = os.Remove(filepath.Dir(l.file.Name()))
	l.removeDirs()
	if closeErr := l.file.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return fmt.Errorf("release lock %q: %w", l.file.Name(), err)
	}
	return nil
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

// holder reads who holds the lock at path. The holder writes its pid right
// after it locks, so an empty file gets a few short retries.
func holder(path string) error {
	held := &HeldError{Path: path}
	for range 10 {
		data, err := inputfile.Read(path, ownerLimit)
		if err == nil {
			pid, command, _ := strings.Cut(string(bytes.TrimSpace(data)), "\n")
			if n, err := strconv.Atoi(pid); err == nil && n > 0 {
				held.PID, held.Command = n, command
				return held
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return held
}

// oneLine keeps a command line on one line of the lock file.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
