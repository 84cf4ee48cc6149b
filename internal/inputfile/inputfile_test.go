package inputfile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func write(t *testing.T, dir, name string, size int) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, bytes.Repeat([]byte("x"), size), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	const limit = 100
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	exact := write(t, dir, "exact.yaml", limit)
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(exact, link); err != nil {
		t.Fatal(err)
	}
	zeroLink := filepath.Join(dir, "zero.yaml")
	if err := os.Symlink("/dev/zero", zeroLink); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		wantSize   int
		wantErr    error
		wantMsg    []string // substrings of the error
	}{
		{"exactly the limit", exact, limit, nil, nil},
		{"empty", write(t, dir, "empty.yaml", 0), 0, nil, nil},
		{"symlink to a regular file", link, limit, nil, nil},
		{"one byte too many", write(t, dir, "big.yaml", limit+1), 0, ErrTooLarge, []string{"big.yaml", "file too large: 101 bytes, the limit is 100 bytes"}},
		{"FIFO", fifo, 0, ErrNotRegular, []string{"fifo.yaml", "not a regular file: it is a FIFO"}},
		{"/dev/zero", "/dev/zero", 0, ErrNotRegular, []string{`"/dev/zero"`, "a character device"}},
		{"symlink to /dev/zero", zeroLink, 0, ErrNotRegular, []string{"zero.yaml", "a character device"}},
		{"directory", dir, 0, ErrNotRegular, []string{dir, "a directory"}},
		{"missing", filepath.Join(dir, "nope.yaml"), 0, fs.ErrNotExist, []string{"nope.yaml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan struct{})
			var data []byte
			var err error
			go func() {
				defer close(done)
				data, err = Read(tt.path, limit)
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("Read(%s) blocks", tt.path)
			}
			if tt.wantErr == nil {
				if err != nil || len(data) != tt.wantSize {
					t.Fatalf("got %d bytes, %v; want %d bytes", len(data), err, tt.wantSize)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("got %v, want %v", err, tt.wantErr)
			}
			for _, w := range tt.wantMsg {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestReadUnderstatedSize covers a file whose size says it fits but whose
// content does not, as for files under /proc or one growing while read.
func TestReadUnderstatedSize(t *testing.T) {
	const path = "/proc/self/status" // a regular file of size 0
	if info, err := os.Stat(path); err != nil || info.Size() != 0 || !info.Mode().IsRegular() {
		t.Fatalf("%s is not a regular file of size 0 here: the test needs one", path)
	}
	if _, err := Read(path, 20); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "more than 20 bytes") {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
}

// TestReadFileChecksTheOpenFile covers a path that was replaced between a
// check and the open: ReadFile refuses what was actually opened.
func TestReadFileChecksTheOpenFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{dir, fifo} {
		f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ReadFile(f, "given-name", 10); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), `"given-name"`) {
			t.Errorf("%s: got %v, want ErrNotRegular naming given-name", path, err)
		}
		_ = f.Close()
	}
}

func TestLimitsInErrors(t *testing.T) {
	for _, tt := range []struct {
		limit int64
		want  string
	}{
		{ConfigLimit, "4 MiB (4194304 bytes)"}, {ManifestLimit, "10 MiB (10485760 bytes)"}, {PatchLimit, "1 MiB (1048576 bytes)"},
		{BundleLimit, "16 MiB (16777216 bytes)"}, {KeyLimit, "4 KiB (4096 bytes)"}, {100, "100 bytes"},
	} {
		if got := size(tt.limit); got != tt.want {
			t.Errorf("size(%d) = %q, want %q", tt.limit, got, tt.want)
		}
	}
}
