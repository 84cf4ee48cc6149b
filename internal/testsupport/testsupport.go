// Package testsupport holds the helpers that the tests of several packages
// and the test suites share, once: a free port of the host's loopback, the
// last lines of an output, the files of a gzipped tar archive, and an
// output buffer safe to write and read at once. Only
// tests use it (their _test.go files and the suites under test/); it
// imports the standard library alone.
package testsupport

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
)

// FreePort is a TCP port of the host's loopback (127.0.0.1) that nothing
// listened on when it returned: it was listened on, then closed. It fails
// the test when no port can be had.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// LastLines is the last n lines of s (all of them when it has fewer),
// without s's final newline: the end of a command's output or of a log,
// for a failure's message.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// ReadTarGz is the contents of a gzipped tar archive's files, by their
// names in it. It fails the test when the archive cannot be read whole.
func ReadTarGz(t testing.TB, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	files := map[string]string{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, h.Name, err)
		}
		files[h.Name] = string(data)
	}
}

// SyncBuffer is an output that a process or a goroutine writes while the
// test reads it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
