// Package atomicfile is the one durable write of the tree: content goes to
// a dot-prefixed temp file beside its path (.NAME.tmp-*, which
// files.RemoveTempFiles sweeps after a crash and the kubelet ignores in its
// manifest directory), is synced, and only then takes the path's place by
// rename, after which the directory is synced. A reader sees the complete
// old file or the complete new one, never a part, and a crash leaves at
// most a temp file. Every writer of kubeboot reaches disk through it:
// files.AtomicWriter for node files, and directly the writers of large
// streamed files (etcd snapshots, their S3 downloads, the lab's archives),
// which cannot import package files (files depends, through output and
// health, on etcd).
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// File is a file being written to take path's place: an io.Writer into the
// temp file, which nothing sees at path until Commit. A File that is not
// committed leaves nothing behind once aborted: defer Abort right after
// Create.
type File struct {
	// BeforeStep, when set, runs before each step of Commit or CommitNew
	// (chmod, sync, close, rename or link, remove, sync-dir) and fails the
	// step when it returns an error; tests use it to inject failures.
	BeforeStep func(step string) error

	tmp  *os.File
	path string
	mode fs.FileMode
	// err is the first failed Write: a File with a hole is never committed.
	err error
	// ended is set by the first Commit, CommitNew or Abort: the File takes
	// no more writes and no second commit.
	ended bool
	// tmpGone is set once no temp file is left to remove: renamed to path,
	// or removed.
	tmpGone bool
}

// Create starts a file that will take path's place with mode: a temp file
// in path's directory, which must exist. It does not look at what path is
// now; a caller that must not replace a directory or a device checks first.
func Create(path string, mode fs.FileMode) (*File, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, err
	}
	return &File{tmp: tmp, path: path, mode: mode}, nil
}

// Write appends p to the temp file. After a failed Write, Commit fails too.
func (f *File) Write(p []byte) (int, error) {
	if f.ended {
		return 0, fmt.Errorf("write %s: %w", f.tmp.Name(), os.ErrClosed)
	}
	n, err := f.tmp.Write(p)
	if err != nil && f.err == nil {
		f.err = err
	}
	return n, err
}

// Name is the temp file's path, for a caller that reads back or verifies
// what it wrote before it commits.
func (f *File) Name() string { return f.tmp.Name() }

// Commit makes the written content path's, replacing what path was: it
// sets the mode exactly (whatever the umask), syncs and closes the temp
// file, renames it over path, and syncs the directory. On a failure before
// the rename the temp file is removed and path is as it was; a failure of
// the last sync leaves the new file in place, its durability across a
// power loss unconfirmed, and says so.
func (f *File) Commit() error {
	return f.commit("rename", func() error {
		if err := os.Rename(f.tmp.Name(), f.path); err != nil {
			return err
		}
		f.tmpGone = true
		return nil
	})
}

// CommitNew is Commit for a path that must not exist yet: the temp file is
// linked at path, which fails with an error that wraps fs.ErrExist rather
// than replace anything there, and then removed.
func (f *File) CommitNew() error {
	return f.commit("link", func() error {
		if err := os.Link(f.tmp.Name(), f.path); err != nil {
			return err
		}
		// path holds the content now: a failure from here on leaves it,
		// and Abort removes only the temp file's name.
		if err := f.step("remove"); err != nil {
			return err
		}
		if err := os.Remove(f.tmp.Name()); err != nil {
			return err
		}
		f.tmpGone = true
		return nil
	})
}

// commit runs the steps that end every write, place being the one that
// puts the temp file at path.
func (f *File) commit(name string, place func() error) error {
	if f.ended {
		return fmt.Errorf("commit %s: %w", f.path, os.ErrClosed)
	}
	defer f.Abort() // ends the File; removes the temp file unless placed
	if f.err != nil {
		return f.err
	}
	steps := []struct {
		name string
		do   func() error
	}{
		// Chmod on the open file sets the mode exactly, whatever the umask.
		{"chmod", func() error { return f.tmp.Chmod(f.mode) }},
		{"sync", f.tmp.Sync},
		{"close", f.tmp.Close},
		{name, place},
		{"sync-dir", func() error { return syncDir(filepath.Dir(f.path)) }},
	}
	for _, s := range steps {
		if err := f.step(s.name); err != nil {
			return err
		}
		if err := s.do(); err != nil {
			if s.name == "sync-dir" {
				// The new file is in place: only its durability across a
				// power loss is unconfirmed.
				return fmt.Errorf("sync directory %q: %w", filepath.Dir(f.path), err)
			}
			return err
		}
	}
	return nil
}

// step runs BeforeStep, if set, for the step name.
func (f *File) step(name string) error {
	if f.BeforeStep == nil {
		return nil
	}
	return f.BeforeStep(name)
}

// Abort removes the temp file unless it was committed, leaving path as it
// was. It is safe to call more than once and after Commit, so it can be
// deferred; a temp file it could not remove is left for
// files.RemoveTempFiles.
func (f *File) Abort() {
	f.ended = true
	_ = f.tmp.Close() // an error is the file's being closed already
	if !f.tmpGone && os.Remove(f.tmp.Name()) == nil {
		f.tmpGone = true
	}
}

// WriteFile makes path hold data with mode, atomically and durably: a
// temp file, synced, renamed over path, the directory synced. On a failure
// path is as it was, but for a failed sync of the directory (see Commit).
func WriteFile(path string, data []byte, mode fs.FileMode) error {
	f, err := Create(path, mode)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Commit()
}

// Move moves a file or directory from one path to another in the same
// filesystem with rename(2), atomically, then syncs both parent
// directories so that the move survives a crash. Something at to is
// refused, never replaced.
func Move(from, to string) error {
	if _, err := os.Lstat(to); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("move %q to %q: the target exists", from, to)
	}
	if err := os.Rename(from, to); err != nil {
		return fmt.Errorf("move %q to %q: %w", from, to, err)
	}
	dirs := []string{filepath.Dir(to)}
	if from := filepath.Dir(from); from != dirs[0] {
		dirs = append(dirs, from)
	}
	for _, dir := range dirs {
		if err := syncDir(dir); err != nil {
			return fmt.Errorf("sync %q: %w", dir, err)
		}
	}
	return nil
}

// syncDir makes the entries of dir, such as a rename into it, durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}
