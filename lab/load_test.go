package lab_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/lab"
)

// writeTar writes a tar file of the named empty entries.
func writeTar(t *testing.T, names ...string) string {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, name := range names {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "images.tar")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLoadRefuses: lab load checks every archive and node before it
// touches a node: no archive, a missing file, a file that is no tar, a tar
// that is neither `docker save`'s nor an OCI layout, and a node not in
// the lab are each refused, naming it. (The lab has no machine running:
// a check that came after the import would fail on that instead.)
func TestLoadRefuses(t *testing.T) {
	c, err := lab.LoadCluster(writeDescription(t, header+"subnet: 10.89.0.0/24\npodSubnet: 10.245.0.0/16\nnodes: [{name: cp1, role: control-plane}, {name: w1, role: worker}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	l := lab.MachineLab{Cluster: c, BinDir: "/bin-dir"}
	notTar := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(notTar, []byte("not a tar file, but longer than one block of it? no: a short text"), 0o600); err != nil {
		t.Fatal(err)
	}
	docker, oci := writeTar(t, "manifest.json", "blobs/x"), writeTar(t, "oci-layout", "./index.json")
	for _, tc := range []struct {
		name            string
		archives, nodes []string
		want            string
	}{
		{"no archive", nil, nil, "no image archive given"},
		{"a missing file", []string{docker, "/nonexistent/app.tar"}, nil, "/nonexistent/app.tar: no such file"},
		{"no tar", []string{notTar}, nil, notTar + " is no tar file"},
		{"neither format", []string{writeTar(t, "hello.txt")}, nil, "holds neither manifest.json nor index.json"},
		{"a node not in the lab", []string{docker, oci}, []string{"w1", "w9"}, `no node "w9": its nodes are cp1, w1`},
	} {
		_, err := l.Load(context.Background(), tc.archives, tc.nodes)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// TestImportArchive: an archive is streamed into `ctr images import` in
// the kubelet's namespace, and the images ctr saved are what it loaded;
// ctr's failure carries its output.
func TestImportArchive(t *testing.T) {
	path := writeTar(t, "manifest.json")
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var argv []string
	var streamed []byte
	ctr := func(_ context.Context, stdin io.Reader, stdout, _ io.Writer, args ...string) error {
		argv = args
		if streamed, err = io.ReadAll(stdin); err != nil {
			return err
		}
		_, err := io.WriteString(stdout, "example.com/app:1              \tsaved\t\napplication/vnd.docker.distribution.manifest.v2+json sha256:cd9e\n"+
			"example.com/app:1              \tsaved\t\nexample.com/tools:2\tsaved\t\nImporting\telapsed: 0.2 s\ttotal:   0.0 B\t(0.0 B/s)\t\n")
		return err
	}
	refs, err := lab.ImportArchive(context.Background(), ctr, path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"example.com/app:1", "example.com/tools:2"}, refs); diff != "" {
		t.Errorf("images (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ctr", "-n", "k8s.io", "images", "import", "-"}, argv); diff != "" {
		t.Errorf("command (-want +got):\n%s", diff)
	}
	if !bytes.Equal(streamed, want) {
		t.Error("ctr did not read the archive on its stdin")
	}

	failing := func(_ context.Context, _ io.Reader, stdout, _ io.Writer, _ ...string) error {
		_, _ = io.WriteString(stdout, "ctr: unrecognized image format")
		return errors.New("exit status 1")
	}
	if _, err := lab.ImportArchive(context.Background(), failing, path); err == nil || !strings.Contains(err.Error(), "unrecognized image format") {
		t.Errorf("a failed import: %v", err)
	}
}
