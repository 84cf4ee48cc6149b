package testsupport_test

import (
	"archive/tar"
	"compress/gzip"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// TestFreePort: the port is one a listener can take on the loopback.
func TestFreePort(t *testing.T) {
	port := testsupport.FreePort(t)
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("listen on the free port %d: %v", port, err)
	}
	_ = l.Close()
}

// TestLastLines: the last n lines, the final newline dropped; all of a
// shorter text.
func TestLastLines(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb\nc", 2, "b\nc"},
		{"a\nb\n", 5, "a\nb"},
		{"", 3, ""},
		{"a\nb\n", 0, ""},
	} {
		if got := testsupport.LastLines(tc.s, tc.n); got != tc.want {
			t.Errorf("LastLines(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

// TestReadTarGz: each file's contents by its name in the archive.
func TestReadTarGz(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.tar.gz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	for name, data := range map[string]string{"top/one.txt": "one\n", "top/dir/two.log": "two"} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	for _, close := range []func() error{tw.Close, zw.Close, f.Close} {
		if err := close(); err != nil {
			t.Fatal(err)
		}
	}
	files := testsupport.ReadTarGz(t, path)
	if len(files) != 2 || files["top/one.txt"] != "one\n" || files["top/dir/two.log"] != "two" {
		t.Errorf("ReadTarGz: %q", files)
	}
}
