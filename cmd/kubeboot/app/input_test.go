package app

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Hostile inputs fail at once with an error naming the file: a FIFO never
// blocks, /dev/zero is never read, a huge file is never read whole.
func TestHostileInputFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge")
	if err := os.WriteFile(huge, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 64<<20); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"validate /dev/zero", []string{"validate", "/dev/zero"}, 1, `"/dev/zero": not a regular file: it is a character device`},
		{"validate a FIFO", []string{"validate", fifo}, 1, "it is a FIFO"},
		// The kubelet refuses a manifest over 10 MiB: so does validate, unread.
		{"validate a huge file", []string{"validate", huge}, 3, "the kubelet would reject 1 of 1 manifests"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			type result struct {
				code   int
				stderr string
			}
			done := make(chan result, 1)
			go func() {
				code, _, stderr := runCLI(t, tt.args...)
				done <- result{code, stderr}
			}()
			select {
			case r := <-done:
				if r.code != tt.code || !strings.Contains(r.stderr, tt.stderr) {
					t.Errorf("exit %d, stderr %q; want %d and %q", r.code, r.stderr, tt.code, tt.stderr)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("blocked for 10s")
			}
		})
	}
}
