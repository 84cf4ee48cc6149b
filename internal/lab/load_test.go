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
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/internal/lab"
)

// writeTar writes a tar file of the given entries (name: content).
func writeTar(t *testing.T, entries ...[2]string) string {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Name: e[0], Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(e[1]))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e[1])); err != nil {
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

// dockerArchive and ociArchive are the two formats' indexes, naming
// example.com/app:1 and example.com/tools:2.
func dockerArchive(t *testing.T) string {
	return writeTar(t, [2]string{"blobs/x", "layer"},
		[2]string{"manifest.json", `[{"Config":"c.json","RepoTags":["example.com/tools:2","example.com/app:1"],"Layers":[]}]`})
}

func ociArchive(t *testing.T) string {
	return writeTar(t, [2]string{"oci-layout", `{"imageLayoutVersion":"1.0.0"}`},
		[2]string{"./index.json", `{"schemaVersion":2,"manifests":[{"annotations":{"io.containerd.image.name":"example.com/app:1"}},{"annotations":{"io.containerd.image.name":"example.com/tools:2"}}]}`})
}

// TestArchiveRefs: the images an archive names, from either format.
func TestArchiveRefs(t *testing.T) {
	for name, path := range map[string]string{"docker save": dockerArchive(t), "OCI": ociArchive(t)} {
		refs, err := lab.ArchiveRefs(path)
		if err != nil || !cmp.Equal(refs, []string{"example.com/app:1", "example.com/tools:2"}) {
			t.Errorf("%s: %v, %v", name, refs, err)
		}
	}
}

// TestLoadRefuses: lab load checks every archive and node before it
// touches a node: no archive, a missing file, a file that is no tar, a tar
// that is neither `docker save`'s nor an OCI layout, an archive that names
// no image, and a node not in the lab are each refused, naming it. (The
// lab has no machine running: a check that came after the import would
// fail on that instead.)
func TestLoadRefuses(t *testing.T) {
	c, err := lab.LoadCluster(writeDescription(t, header+"subnet: 10.89.0.0/24\npodSubnet: 10.245.0.0/16\nnodes: [{name: cp1, role: control-plane}, {name: w1, role: worker}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	l := lab.Lab{Cluster: c, BinDir: "/bin-dir"}
	notTar := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(notTar, []byte("not a tar file, but a short text"), 0o600); err != nil {
		t.Fatal(err)
	}
	docker, oci := dockerArchive(t), ociArchive(t)
	for _, tc := range []struct {
		name            string
		archives, nodes []string
		want            string
	}{
		{"no archive", nil, nil, "no image archive given"},
		{"a missing file", []string{docker, "/nonexistent/app.tar"}, nil, "/nonexistent/app.tar: no such file"},
		{"no tar", []string{notTar}, nil, notTar + " is no tar file"},
		{"neither format", []string{writeTar(t, [2]string{"hello.txt", "hi"})}, nil, "holds neither manifest.json nor index.json"},
		{"no name", []string{writeTar(t, [2]string{"manifest.json", `[{"Config":"c.json","RepoTags":null}]`})}, nil, "names no image: tag what you save"},
		{"a node not in the lab", []string{docker, oci}, []string{"w1", "w9"}, `no node "w9": its nodes are cp1, w1`},
	} {
		_, err := l.Load(context.Background(), tc.archives, tc.nodes)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// TestLoadRefusesWhatItCannotReadTwice: an archive that is no regular
// file, such as bash's <(docker save ...) or a FIFO nobody writes to, is
// refused at once, saying to save it to a file; an index larger than any
// real one is refused before it is decoded.
func TestLoadRefusesWhatItCannotReadTwice(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "images.tar")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	manifest := "[" + strings.Repeat(`{"RepoTags":["example.com/app:1"]},`, 200_000) + "{}]"
	for _, tc := range []struct{ name, path, want string }{
		{"a FIFO", fifo, "not a regular file: it is a FIFO (named pipe): lab load reads an archive more than once, so save it to a file first"},
		{"a device", "/dev/zero", "not a regular file: it is a character device"},
		{"a directory", t.TempDir(), "not a regular file: it is a directory"},
		{"a manifest.json of 7 MiB", writeTar(t, [2]string{"manifest.json", manifest}), "its manifest.json has 7000004 bytes, more than the 4 MiB"},
		{"an index.json of 7 MiB", writeTar(t, [2]string{"index.json", manifest}), "its index.json has 7000004 bytes"},
	} {
		done := make(chan error, 1)
		go func() { _, err := lab.ArchiveRefs(tc.path); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: still reading after 10s", tc.name)
		}
	}
}

// TestImportArchive: an archive is streamed into `ctr images import` in
// the kubelet's namespace, then the node's images must hold every one the
// archive names; ctr's failure, or an image missing after the import, is
// an error that says which.
func TestImportArchive(t *testing.T) {
	path := dockerArchive(t)
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var calls [][]string
	var streamed []byte
	images := "example.com/app:1\nexample.com/tools:2\nregistry.k8s.io/pause:3.10.2\n"
	ctr := func(_ context.Context, stdin io.Reader, stdout, _ io.Writer, args ...string) error {
		calls = append(calls, args)
		if stdin != nil {
			if streamed, err = io.ReadAll(stdin); err != nil {
				return err
			}
		}
		if args[4] == "ls" {
			_, err := io.WriteString(stdout, images)
			return err
		}
		return nil
	}
	refs := []string{"example.com/app:1", "example.com/tools:2"}
	if err := lab.ImportArchive(context.Background(), ctr, path, refs); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][]string{{"ctr", "-n", "k8s.io", "images", "import", "-"}, {"ctr", "-n", "k8s.io", "images", "ls", "-q"}}, calls); diff != "" {
		t.Errorf("commands (-want +got):\n%s", diff)
	}
	if !bytes.Equal(streamed, want) {
		t.Error("ctr did not read the archive on its stdin")
	}

	images = "registry.k8s.io/pause:3.10.2\nexample.com/app:1\n"
	if err := lab.ImportArchive(context.Background(), ctr, path, refs); err == nil || !strings.Contains(err.Error(), "left no image example.com/tools:2") {
		t.Errorf("an image missing after the import: %v", err)
	}
	failing := func(_ context.Context, _ io.Reader, stdout, _ io.Writer, _ ...string) error {
		_, _ = io.WriteString(stdout, "ctr: unrecognized image format")
		return errors.New("exit status 1")
	}
	if err := lab.ImportArchive(context.Background(), failing, path, refs); err == nil || !strings.Contains(err.Error(), "unrecognized image format") {
		t.Errorf("a failed import: %v", err)
	}
}
