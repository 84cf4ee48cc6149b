package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// names lists dir's entries.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	return got
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestWriteFileModeIgnoresUmask: the mode is exact whatever the umask,
// and the file replaces the old one.
func TestWriteFileModeIgnoresUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	t.Cleanup(func() { syscall.Umask(old) })
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	must(t, os.WriteFile(path, []byte("old"), 0o600))
	must(t, WriteFile(path, []byte("new"), 0o644))
	info, err := os.Stat(path)
	must(t, err)
	if info.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", info.Mode().Perm())
	}
	if got, _ := os.ReadFile(path); string(got) != "new" {
		t.Errorf("content %q, want new", got)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"f"}) {
		t.Errorf("directory holds %v, want f alone", got)
	}
}

// TestCreateTempBesidePath: the temp file is dot-prefixed in path's
// directory, as files.RemoveTempFiles finds it, and can be read back
// before the commit, while path still holds the old content.
func TestCreateTempBesidePath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "snap.db")
	must(t, os.WriteFile(path, []byte("old"), 0o600))
	f, err := Create(path, 0o600)
	must(t, err)
	defer f.Abort()
	if _, err := f.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(f.Name()) != dir || !strings.HasPrefix(filepath.Base(f.Name()), ".snap.db.tmp-") {
		t.Errorf("temp file %s, want %s/.snap.db.tmp-*", f.Name(), dir)
	}
	if got, _ := os.ReadFile(f.Name()); string(got) != "new" {
		t.Errorf("the temp file reads %q before the commit, want new", got)
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Errorf("path reads %q before the commit, want old", got)
	}
	must(t, f.Commit())
	if got, _ := os.ReadFile(path); string(got) != "new" {
		t.Errorf("path reads %q after the commit, want new", got)
	}
	f.Abort() // after a commit, removes nothing
	if got := names(t, dir); !slices.Equal(got, []string{"snap.db"}) {
		t.Errorf("directory holds %v, want snap.db alone", got)
	}
	if err := f.Commit(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("a second commit: %v, want os.ErrClosed", err)
	}
}

// TestAbortLeavesPath: an aborted file leaves path as it was and no temp
// file, and cannot be written to or committed after.
func TestAbortLeavesPath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	must(t, os.WriteFile(path, []byte("old"), 0o600))
	f, err := Create(path, 0o600)
	must(t, err)
	if _, err := f.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	f.Abort()
	f.Abort()
	if _, err := f.Write([]byte("more")); err == nil {
		t.Error("a write after Abort succeeded")
	}
	if err := f.Commit(); err == nil {
		t.Error("a commit after Abort succeeded")
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Errorf("content %q, want old", got)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"f"}) {
		t.Errorf("directory holds %v, want f alone", got)
	}
}

// TestFailedStepLeavesOldFile: a failure at any step before the file is
// in place leaves the old file (or none) and nothing else; a failure after
// it leaves the new file in place and no temp file.
func TestFailedStepLeavesOldFile(t *testing.T) {
	for _, tc := range []struct {
		step, want string
		commit     func(*File) error
	}{
		{"chmod", "old", (*File).Commit},
		{"sync", "old", (*File).Commit},
		{"close", "old", (*File).Commit},
		{"rename", "old", (*File).Commit},
		{"sync-dir", "new", (*File).Commit},
		{"link", "", (*File).CommitNew},
		{"remove", "new", (*File).CommitNew},
		{"sync-dir", "new", (*File).CommitNew},
	} {
		t.Run(tc.step, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			if tc.want == "old" {
				must(t, os.WriteFile(path, []byte("old"), 0o600))
			}
			f, err := Create(path, 0o600)
			must(t, err)
			defer f.Abort()
			if _, err := f.Write([]byte("new")); err != nil {
				t.Fatal(err)
			}
			injected := errors.New("injected")
			f.BeforeStep = func(name string) error {
				if name == tc.step {
					return injected
				}
				return nil
			}
			err = tc.commit(f)
			if !errors.Is(err, injected) {
				t.Fatalf("got %v, want the injected failure", err)
			}
			f.Abort()
			got, readErr := os.ReadFile(path)
			if tc.want == "" {
				if !errors.Is(readErr, fs.ErrNotExist) {
					t.Errorf("path holds %q, want nothing", got)
				}
				if names := names(t, dir); len(names) != 0 {
					t.Errorf("directory holds %v, want nothing", names)
				}
				return
			}
			if string(got) != tc.want {
				t.Errorf("content %q, want %q", got, tc.want)
			}
			if names := names(t, dir); !slices.Equal(names, []string{"f"}) {
				t.Errorf("directory holds %v, want f alone", names)
			}
		})
	}
}

// TestFailedWriteIsNeverCommitted: a File whose write failed is not
// committed, even if the caller tries.
func TestFailedWriteIsNeverCommitted(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	must(t, os.WriteFile(path, []byte("old"), 0o600))
	f, err := Create(path, 0o600)
	must(t, err)
	defer f.Abort()
	must(t, f.tmp.Close()) // makes the next write fail
	if _, err := f.Write([]byte("new")); err == nil {
		t.Fatal("a write to a closed file succeeded")
	}
	if err := f.Commit(); err == nil {
		t.Error("a file with a failed write was committed")
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Errorf("content %q, want old", got)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"f"}) {
		t.Errorf("directory holds %v, want f alone", got)
	}
}

// TestCommitNewNeverReplaces: CommitNew places a new file, and refuses
// one that exists with an error that wraps fs.ErrExist, leaving it and no
// temp file.
func TestCommitNewNeverReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "export.tar.gz")
	for i, content := range []string{"first", "second"} {
		f, err := Create(path, 0o600)
		must(t, err)
		if _, err := f.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
		err = f.CommitNew()
		f.Abort()
		if i == 0 && err != nil {
			t.Fatal(err)
		}
		if i == 1 && !errors.Is(err, fs.ErrExist) {
			t.Errorf("a second CommitNew: %v, want fs.ErrExist", err)
		}
	}
	if got, _ := os.ReadFile(path); string(got) != "first" {
		t.Errorf("content %q, want first", got)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"export.tar.gz"}) {
		t.Errorf("directory holds %v, want export.tar.gz alone", got)
	}
}

// TestMove: a directory moves, and a target that exists is refused and
// left as it was.
func TestMove(t *testing.T) {
	dir := t.TempDir()
	from, to := filepath.Join(dir, "scratch", "root"), filepath.Join(dir, "store")
	must(t, os.MkdirAll(filepath.Join(from, "sub"), 0o755))
	must(t, Move(from, to))
	if _, err := os.Stat(filepath.Join(to, "sub")); err != nil {
		t.Errorf("after the move: %v", err)
	}
	if _, err := os.Stat(from); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the source is still there: %v", err)
	}
	other := filepath.Join(dir, "other")
	must(t, os.Mkdir(other, 0o755))
	if err := Move(other, to); err == nil || !strings.Contains(err.Error(), "the target exists") {
		t.Errorf("a move onto an existing path: %v", err)
	}
	if _, err := os.Stat(filepath.Join(to, "sub")); err != nil {
		t.Errorf("the refused move changed the target: %v", err)
	}
}
