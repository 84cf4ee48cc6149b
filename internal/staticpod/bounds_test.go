package staticpod

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/kubeboot/kubeboot/internal/inputfile"
)

// TestValidateRefusesTooManyNodes covers manifests under the kubelet's
// 10 MiB whose millions of tiny items would take gigabytes to decode:
// each is rejected at once, with a finding that says why, in YAML and in
// JSON.
func TestValidateRefusesTooManyNodes(t *testing.T) {
	head := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: i\n    args: ["
	for name, data := range map[string]string{
		"flow list":  head + strings.Repeat("a,", maxManifestSize/2-len(head)) + "]\n",
		"block list": strings.TrimSuffix(head, " [") + "\n" + strings.Repeat("    - a\n", maxManifestSize/8-len(head)),
		"json":       `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"i","args":[` + strings.Repeat(`1,`, 4<<20) + `1]}]}}`,
		"documents":  head + "]\n" + strings.Repeat("---\n", 2<<20),
	} {
		start := time.Now()
		res := Validate("p.yaml", []byte(data), "node")
		if res.Accepted || len(res.Errors) != 1 || !strings.Contains(res.Errors[0].Message, "not decoded: more than 100000 values") {
			t.Errorf("%s: got %+v, want one finding of too many values", name, res.Errors)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s: took %v", name, took)
		}
	}
}

// endlessFS holds one regular file, which says it is empty and never
// ends, as a file under /proc may; a read past twice the kubelet's limit
// fails.
type endlessFS struct{}

// Open implements fs.FS.
func (endlessFS) Open(name string) (fs.File, error) {
	if name == "." {
		return fstest.MapFS{"big.yaml": {}}.Open(name)
	}
	if name != "big.yaml" {
		return nil, fs.ErrNotExist
	}
	return &endlessFile{}, nil
}

// endlessFile is endlessFS's file.
type endlessFile struct{ read int }

// Stat implements fs.File.
func (*endlessFile) Stat() (fs.FileInfo, error) {
	return fstest.MapFS{"big.yaml": {}}.Stat("big.yaml")
}

// Read implements fs.File.
func (f *endlessFile) Read(p []byte) (int, error) {
	if f.read > 2*maxManifestSize {
		return 0, errors.New("read past twice the limit")
	}
	clear(p)
	f.read += len(p)
	return len(p), nil
}

// Close implements fs.File.
func (*endlessFile) Close() error { return nil }

// TestValidateDirReadsNoMoreThanTheLimit covers a file larger than its
// stat says: the lint reads one byte past the kubelet's limit, not all of
// it, and reports the file as too large.
func TestValidateDirReadsNoMoreThanTheLimit(t *testing.T) {
	results, err := ValidateDir(endlessFS{}, "node")
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 || results[0].Accepted || len(results[0].Errors) != 1 || results[0].Errors[0].Message != "larger than 10 MiB: the kubelet refuses to read it" {
		t.Fatalf("got %+v", results)
	}
	if inputfile.ManifestLimit != maxManifestSize {
		t.Errorf("inputfile.ManifestLimit %d, the kubelet's %d", inputfile.ManifestLimit, maxManifestSize)
	}
}
