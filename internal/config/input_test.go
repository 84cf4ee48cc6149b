package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/inputfile"
)

// TestLoadRefusesHostileFiles checks that every loader refuses, promptly
// and as invalid config (exit 2), what is not a config file: a FIFO would
// block the read forever, /dev/zero would exhaust memory.
func TestLoadRefusesHostileFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte(header), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, inputfile.ConfigLimit+1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	loaders := map[string]func(string) error{
		"init":     func(p string) error { _, err := loadInit(p, testHost); return err },
		"join":     func(p string) error { _, err := loadJoinFile(p, testHost); return err },
		"node":     func(p string) error { _, err := loadNode(p, testHost); return err },
		"worker":   func(p string) error { _, err := loadWorkerJoin(p, testHost, WorkerFlags{}); return err },
		"any kind": func(p string) error { _, err := Load(p, Env{Host: testHost}); return err },
	}
	tests := []struct {
		name, path, want string
	}{
		{"FIFO", fifo, "not a regular file: it is a FIFO"},
		{"character device", "/dev/zero", "not a regular file: it is a character device"},
		{"directory", dir, "not a regular file: it is a directory"},
		{"too big", big, "file too large: 4194305 bytes, the limit is 4 MiB"},
	}
	for loader, load := range loaders {
		for _, tt := range tests {
			t.Run(loader+"/"+tt.name, func(t *testing.T) {
				done := make(chan error, 1)
				go func() { done <- load(tt.path) }()
				var err error
				select {
				case err = <-done:
				case <-time.After(5 * time.Second):
					t.Fatalf("%s(%s) blocks", loader, tt.path)
				}
				var inv *InvalidError
				if !errors.As(err, &inv) || inv.ExitCode() != 2 {
					t.Fatalf("got %v, want an *InvalidError", err)
				}
				if msg := err.Error(); !strings.Contains(msg, tt.path) || !strings.Contains(msg, tt.want) {
					t.Errorf("error %q does not name %s and contain %q", msg, tt.path, tt.want)
				}
			})
		}
	}
}
