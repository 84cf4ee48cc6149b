package app

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/kubeboot/kubeboot/internal/imagebundle/containerdtest"
)

// nodeConfig writes a ClusterConfiguration whose runtime is c.
func nodeConfig(t *testing.T, c *containerdtest.Containerd) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "node.yaml")
	text := "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nkubelet:\n  containerRuntimeEndpoint: " + c.Endpoint() + "\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// smallImage is a random image of one small layer for the node's platform.
func smallImage(t *testing.T) v1.Image {
	t.Helper()
	img, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	return img
}

// loadImages puts a random image under each ref into c, through a docker
// save archive and ctr images import.
func loadImages(t *testing.T, c *containerdtest.Containerd, refs []string) {
	t.Helper()
	images := map[name.Reference]v1.Image{}
	for _, ref := range refs {
		r, err := name.ParseReference(ref)
		if err != nil {
			t.Fatal(err)
		}
		images[r] = smallImage(t)
	}
	archive := filepath.Join(t.TempDir(), "images.tar")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.MultiRefWrite(images, f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	c.Ctr(t, "images", "import", archive)
}

// bundleRun runs images export or import with -o json and returns its exit
// code, its result and its output.
func bundleRun(t *testing.T, args ...string) (int, bundleResult, string) {
	t.Helper()
	code, stdout, stderr := runCLI(t, append(args, "-o", "json")...)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var last struct{ Result bundleResult }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatalf("%v: exit %d: %v: %s%s", args, code, err, stdout, stderr)
	}
	return code, last.Result, stdout + stderr
}

// TestImagesExportImport: export --config writes every image of images
// list from the node's containerd into a bundle, and import --config loads
// them all into another node's containerd; a bundle lacking one of the
// node's images, or with a corrupt layer, is refused with exit 2 naming
// the file and the image, and that containerd is left as it was.
func TestImagesExportImport(t *testing.T) {
	connected, node := containerdtest.Start(t), containerdtest.Start(t)
	code, stdout, stderr := runCLI(t, "images", "list", "--config", nodeConfig(t, connected), "-o", "json")
	if code != 0 {
		t.Fatalf("images list: exit %d: %s", code, stderr)
	}
	var listed struct{ Images []string }
	if err := json.Unmarshal([]byte(stdout), &listed); err != nil {
		t.Fatal(err)
	}
	loadImages(t, connected, listed.Images)
	dir := t.TempDir()
	bundle := filepath.Join(dir, "images.tar")

	code, res, out := bundleRun(t, "images", "export", "--config", nodeConfig(t, connected), "--out", bundle)
	if code != 0 || !res.OK || len(res.Images) != len(listed.Images) || res.Bundle != bundle {
		t.Fatalf("images export --config: exit %d, result %+v: %s", code, res, out)
	}
	// The node's bad bundles: one lacking the last image, one corrupt.
	partial := filepath.Join(dir, "partial.tar")
	missing := listed.Images[len(listed.Images)-1]
	code, _, out = bundleRun(t, slices.Concat([]string{"images", "export", "--runtime-endpoint", connected.Endpoint(), "--out", partial}, listed.Images[:len(listed.Images)-1])...)
	if code != 0 {
		t.Fatalf("images export IMAGE...: exit %d: %s", code, out)
	}
	corrupt := corruptLastBlob(t, bundle, filepath.Join(dir, "corrupt.tar"))
	before := [][]string{node.Images(t), node.Content(t)}
	for _, bad := range []struct{ path, names string }{{partial, missing}, {corrupt, ""}} {
		code, res, out := bundleRun(t, "images", "import", bad.path, "--config", nodeConfig(t, node))
		if code != 2 || res.OK || !strings.Contains(res.Error, bad.path) || !strings.Contains(res.Error, bad.names) {
			t.Errorf("images import of bad bundle %s: exit %d, want 2 naming it and %q: %s", bad.path, code, bad.names, out)
		}
	}
	if after := [][]string{node.Images(t), node.Content(t)}; !slices.EqualFunc(before, after, slices.Equal) {
		t.Errorf("bad bundles changed the node's containerd: images and content before %v, after %v", before, after)
	}

	code, res, out = bundleRun(t, "images", "import", bundle, "--config", nodeConfig(t, node))
	if code != 0 || !res.OK || len(res.Images) != len(listed.Images) {
		t.Fatalf("images import --config: exit %d, result %+v: %s", code, res, out)
	}
	if got := node.Images(t); !slices.Equal(got, slices.Sorted(slices.Values(listed.Images))) {
		t.Errorf("the node's images after the import: %v, want %v", got, listed.Images)
	}
}

// corruptLastBlob copies a bundle to path with one byte of its last blob
// changed: a blob whose bytes do not match its digest.
func corruptLastBlob(t *testing.T, bundle, path string) string {
	t.Helper()
	data, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	var end int64
	r := bytes.NewReader(data)
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(hdr.Name, "blobs/") {
			// The member's bytes end where the reader is after reading them.
			if _, err := io.Copy(io.Discard, tr); err != nil {
				t.Fatal(err)
			}
			end = int64(len(data) - r.Len())
		}
	}
	data = slices.Clone(data)
	data[end-1] ^= 0xff
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestImagesExportFromRegistry: export --from registry IMAGE writes the
// image from its registry, and import --runtime-endpoint loads it.
func TestImagesExportFromRegistry(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/tools/app:1.0"
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, smallImage(t)); err != nil {
		t.Fatal(err)
	}
	c := containerdtest.Start(t)
	bundle := filepath.Join(t.TempDir(), "app.tar")
	code, res, out := bundleRun(t, "images", "export", "--from", "registry", "--out", bundle, ref)
	if code != 0 || len(res.Images) != 1 || res.Images[0].Ref != ref {
		t.Fatalf("images export --from registry: exit %d, result %+v: %s", code, res, out)
	}
	code, res, out = bundleRun(t, "images", "import", bundle, "--runtime-endpoint", c.Endpoint())
	if code != 0 || len(res.Images) != 1 || !slices.Equal(c.Images(t), []string{ref}) {
		t.Fatalf("images import --runtime-endpoint: exit %d, result %+v, images %v: %s", code, res, c.Images(t), out)
	}
}
