// Package files is the only way kubeboot writes to disk. AtomicWriter
// replaces files so that a reader such as the kubelet never sees them
// half-written; DryRunWriter writes nothing and reports what it would write.
// Both record what changed, for the run's result. The write itself, temp
// file, fsync, rename and directory fsync, is package atomicfile's, which
// the writers of streamed files (snapshots, archives) use directly.
package files

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"syscall"

	"github.com/kubeboot/kubeboot/internal/atomicfile"
	"github.com/kubeboot/kubeboot/internal/output"
)

// Writer is the only way phases touch disk. Paths are node paths; a
// writer may place them under a root directory.
type Writer interface {
	// WriteFile makes path hold data with mode, atomically, and leaves the
	// file untouched when it already holds data.
	WriteFile(path string, data []byte, mode fs.FileMode) error
	// ReadFile reads path as the writer sees it, including what a dry run
	// would have written.
	ReadFile(path string) ([]byte, error)
	// MkdirAll creates a directory and its parents, and sets the
	// directory's own mode; it never changes a parent that exists.
	MkdirAll(path string, mode fs.FileMode) error
	// Chown sets the owner and group of an existing path, leaving it
	// untouched when they are right already.
	Chown(path string, uid, gid int) error
	// Remove deletes path; a missing file is not an error.
	Remove(path string) error
	// RemoveAll deletes path and everything under it; a missing path is
	// not an error.
	RemoveAll(path string) error
	// Rename moves a file or directory to a new path in the same
	// filesystem, atomically, and makes the move durable; it refuses to
	// replace anything at to.
	Rename(from, to string) error
	// HostPath maps a node path to the path on this machine.
	HostPath(path string) string
	// Changes lists what the writer wrote, or would write, and what it left alone.
	Changes() Changes
}

// Changes is what a run did to the disk.
type Changes struct {
	// Written are the files created or replaced, and the files and
	// directories whose owner was set back to kubeboot's.
	Written []string `json:"written"`
	// Unchanged are the files that already held the right content.
	Unchanged []string `json:"unchanged"`
}

// changeLog records paths, safe for concurrent phases.
type changeLog struct {
	mu      sync.Mutex
	changes Changes
}

func (l *changeLog) record(path string, written bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if written {
		l.changes.Written = append(l.changes.Written, path)
	} else {
		l.changes.Unchanged = append(l.changes.Unchanged, path)
	}
}

// Changes returns a sorted copy of the record.
func (l *changeLog) Changes() Changes {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := Changes{Written: append([]string{}, l.changes.Written...), Unchanged: append([]string{}, l.changes.Unchanged...)}
	sort.Strings(c.Written)
	sort.Strings(c.Unchanged)
	return c
}

// AtomicWriter writes files so that a reader, such as the kubelet scanning
// its manifest directory, only ever sees the complete old or the complete
// new content: a dot-prefixed temp file in the same directory (the kubelet
// ignores dot files), fsync, rename over the target, fsync the directory.
type AtomicWriter struct {
	// Root prefixes every path; empty means the node's own filesystem.
	Root string
	// Report, when set, receives one event per file written.
	Report *output.Reporter
	// KeepOwner are the node paths of the directories that kubeboot gives
	// to another user through Chown (the etcd data dir): MkdirAll leaves
	// their owner alone. Every other file and directory kubeboot writes is
	// the running user's (root's, on a node), whoever owned it before.
	KeepOwner []string
	changeLog
	// BeforeStep, when set, runs before each step of a write (the temp
	// file, its sync, the rename, the directory sync) and can fail it;
	// tests use it to inject failures and crashes.
	BeforeStep func(step string) error
}

// HostPath maps a node path under Root, its symlinks resolved inside Root.
func (w *AtomicWriter) HostPath(path string) string { return hostPath(w.Root, path) }

// ReadFile reads a regular file of at most 10 MiB at a node path under Root.
func (w *AtomicWriter) ReadFile(path string) ([]byte, error) { return readFile(w.Root, path) }

// MkdirAll creates the directory and sets its mode, whatever the umask,
// tightening a looser existing mode, and its owner to the running user's
// unless it is in KeepOwner; missing parents get 0755. Only the directory
// itself, one kubeboot owns, gets its mode and owner set: an existing
// parent is never changed.
func (w *AtomicWriter) MkdirAll(path string, mode fs.FileMode) error {
	host, err := resolve(w.Root, path)
	if err != nil {
		return err
	}
	// Parents get the usual 0755: only the directory itself is restricted.
	if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
		return fmt.Errorf("create directory %q: %w", filepath.Dir(host), err)
	}
	if err := os.Mkdir(host, mode); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create directory %q: %w", host, err)
	}
	if err := fixMode(host, mode); err != nil {
		return err
	}
	if slices.Contains(w.KeepOwner, filepath.Clean(path)) {
		return nil
	}
	fixed, err := w.fixOwner(path, host)
	if fixed {
		w.record(path, true)
	}
	return err
}

// fixOwner gives host, the place of the node path path, to the running
// user when another owns it, and says whether it did: a file or directory
// of kubeboot's that another user owns is one that user can read (the CA
// key) or replace (a manifest) whatever its mode.
func (w *AtomicWriter) fixOwner(path, host string) (bool, error) {
	want := running()
	have, err := ownerOf(host)
	if err != nil || have == want {
		return false, err
	}
	if err := os.Lchown(host, want.uid, want.gid); err != nil {
		return false, fmt.Errorf("set owner of %q: %w", host, err)
	}
	if w.Report != nil {
		w.Report.Event(output.Event{Level: output.LevelInfo, Msg: fmt.Sprintf("set the owner of %s to %d:%d (was %d:%d)", path, want.uid, want.gid, have.uid, have.gid),
			Fields: map[string]any{"path": path, "uid": want.uid, "gid": want.gid, "wasUid": have.uid, "wasGid": have.gid}})
	}
	return true, nil
}

// MkdirMissing creates path and each missing parent with mode, whatever the
// umask, and changes nothing that exists: it is for a directory kubeboot
// does not own, such as where --out writes, which may well be /tmp.
func (w *AtomicWriter) MkdirMissing(path string, mode fs.FileMode) error {
	host, err := resolve(w.Root, path)
	if err != nil {
		return err
	}
	var missing []string
	for dir := filepath.Clean(host); ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(dir); err == nil || !errors.Is(err, fs.ErrNotExist) || dir == filepath.Dir(dir) {
			break
		}
		missing = append(missing, dir)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		dir := missing[i]
		if err := os.Mkdir(dir, mode); errors.Is(err, fs.ErrExist) {
			continue // created meanwhile by someone else: theirs
		} else if err != nil {
			return fmt.Errorf("create directory %q: %w", dir, err)
		}
		// Mkdir applies the umask; the mode must not depend on it.
		if err := fixMode(dir, mode); err != nil {
			return err
		}
	}
	return nil
}

// Chown sets the owner of a node path under Root unless it is right already.
func (w *AtomicWriter) Chown(path string, uid, gid int) error {
	host, err := resolveLink(w.Root, path)
	if err != nil {
		return err
	}
	info, err := os.Lstat(host)
	if err != nil {
		return fmt.Errorf("stat %q: %w", host, err)
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid && int(st.Gid) == gid {
		return nil
	}
	if err := os.Lchown(host, uid, gid); err != nil {
		return fmt.Errorf("set owner of %q: %w", host, err)
	}
	return nil
}

// WriteFile writes data atomically unless the file already holds it, in
// which case only a wrong mode or owner is corrected; a corrected owner
// counts as written. A symlink in place of the file is replaced, not
// written through; a device, FIFO, socket or directory is refused.
func (w *AtomicWriter) WriteFile(path string, data []byte, mode fs.FileMode) error {
	if current, err := readFile(w.Root, path); err == nil && bytes.Equal(current, data) {
		target, err := resolve(w.Root, path)
		if err != nil {
			return err
		}
		if err := fixMode(target, mode); err != nil {
			return err
		}
		fixed, err := w.fixOwner(path, target)
		if err != nil {
			return err
		}
		w.record(path, fixed)
		return nil
	}
	host, err := resolveLink(w.Root, path)
	if err != nil {
		return err
	}
	if err := checkReplaceable(host, path); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
		return fmt.Errorf("create directory of %q: %w", host, err)
	}
	if err := w.replace(host, data, mode); err != nil {
		return fmt.Errorf("write %q: %w", host, err)
	}
	w.record(path, true)
	if w.Report != nil {
		w.Report.Event(output.Event{Level: output.LevelInfo, Msg: "wrote " + path, Fields: map[string]any{"path": path, "mode": fmt.Sprintf("%04o", mode.Perm()), "size": len(data)}})
	}
	return nil
}

// fixMode sets the mode only when it differs, so a converged run changes
// nothing, not even a ctime.
func fixMode(path string, mode fs.FileMode) error {
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("stat %q: %w", path, err)
	}
	if info.Mode().Perm() != mode.Perm() {
		if err := os.Chmod(path, mode); err != nil {
			return fmt.Errorf("set mode of %q: %w", path, err)
		}
	}
	return nil
}

// replace is the atomic write itself, atomicfile's with BeforeStep run
// before each step. The temp file is removed on any failure, so a failed
// write leaves the old file and nothing else.
func (w *AtomicWriter) replace(target string, data []byte, mode fs.FileMode) error {
	f, err := atomicfile.Create(target, mode)
	if err != nil {
		return err
	}
	defer f.Abort()
	if w.BeforeStep != nil {
		if err := w.BeforeStep("write"); err != nil {
			return err
		}
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	f.BeforeStep = w.BeforeStep
	return f.Commit()
}

// Remove deletes a node path under Root; a missing file is not an error.
func (w *AtomicWriter) Remove(path string) error {
	host, err := resolveLink(w.Root, path)
	if err != nil {
		return err
	}
	if err := os.Remove(host); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %q: %w", host, err)
	}
	return nil
}

// RemoveAll deletes a node path under Root and everything below it.
func (w *AtomicWriter) RemoveAll(path string) error {
	host, err := resolveLink(w.Root, path)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(host); err != nil {
		return fmt.Errorf("remove %q: %w", host, err)
	}
	return nil
}

// Rename moves from to to, both node paths under Root, with rename(2),
// then syncs both parent directories, so that the move survives a crash.
// Something at to is refused, never replaced.
func (w *AtomicWriter) Rename(from, to string) error {
	hostFrom, err := resolveLink(w.Root, from)
	if err != nil {
		return err
	}
	hostTo, err := resolveLink(w.Root, to)
	if err != nil {
		return err
	}
	if err := atomicfile.Move(hostFrom, hostTo); err != nil {
		return err
	}
	w.record(to, true)
	return nil
}

// RemoveTempFiles deletes the dot-prefixed temp files that a crashed write
// left in dir, and returns their node paths.
func RemoveTempFiles(w Writer, dir string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(w.HostPath(dir), ".*.tmp-*"))
	if err != nil {
		return nil, fmt.Errorf("list temp files in %q: %w", dir, err)
	}
	var removed []string
	for _, m := range matches {
		path := filepath.Join(dir, filepath.Base(m))
		if err := w.Remove(path); err != nil {
			return removed, err
		}
		removed = append(removed, path)
	}
	return removed, nil
}
