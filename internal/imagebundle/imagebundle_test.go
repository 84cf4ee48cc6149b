package imagebundle_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/imagebundle"
	"github.com/kubeboot/kubeboot/internal/imagebundle/containerdtest"
)

// serveRegistry runs an in-memory registry on loopback and returns its
// host:port.
func serveRegistry(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// randomImage is an image of layers random layers of size bytes each,
// uncompressed or gzipped, for linux/arch; seed makes it the same image
// every time.
func randomImage(t testing.TB, seed, layers, size int64, mt types.MediaType, arch string) v1.Image {
	t.Helper()
	src := rand.New(rand.NewSource(seed))
	img := empty.Image
	for range layers {
		layer, err := randomLayer(src, size, mt)
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", arch
	cfg.Config.Cmd = []string{"/bin/true"}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// parse parses an image reference.
func parse(t testing.TB, ref string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// randomLayer is a layer of one file of size random bytes: gzipped, or
// for types.OCIUncompressedLayer a plain tar (random.Layer would gzip it
// whatever its media type says).
func randomLayer(src *rand.Rand, size int64, mt types.MediaType) (v1.Layer, error) {
	if mt != types.OCIUncompressedLayer {
		return random.Layer(size, mt, random.WithSource(src))
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("random-%d", src.Int63()), Size: size, Mode: 0o644}); err != nil {
		return nil, err
	}
	if _, err := io.CopyN(tw, src, size); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return static.NewLayer(buf.Bytes(), mt), nil
}

// push pushes an image to ref.
func push(t testing.TB, ref string, img v1.Image) {
	t.Helper()
	if err := remote.Write(parse(t, ref), img); err != nil {
		t.Fatal(err)
	}
}

// pushIndex pushes a multi-platform index of images for amd64 and arm64.
func pushIndex(t testing.TB, ref string, seed int64) {
	t.Helper()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for i, arch := range []string{"amd64", "arm64"} {
		img := randomImage(t, seed+int64(i), 1, 2048, types.DockerLayer, arch)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	if err := remote.WriteIndex(parse(t, ref), idx); err != nil {
		t.Fatal(err)
	}
}

// testImages pushes a single-platform image of two layers and a
// multi-platform index to a registry and returns their references.
func testImages(t testing.TB) []string {
	t.Helper()
	host := serveRegistry(t)
	multi, single := host+"/kubeboot/multi:v2", host+"/kubeboot/single:v1"
	push(t, single, randomImage(t, 1, 2, 4096, types.DockerLayer, runtime.GOARCH))
	pushIndex(t, multi, 10)
	return []string{multi, single} // sorted, as a bundle lists them
}

// export writes a bundle of refs into dir.
func export(t testing.TB, dir, file string, opts imagebundle.ExportOptions) string {
	t.Helper()
	path := filepath.Join(dir, file)
	if _, err := imagebundle.ExportFile(context.Background(), path, opts); err != nil {
		t.Fatal(err)
	}
	return path
}

// importBundle verifies and imports a bundle into c.
func importBundle(t testing.TB, path string, c *containerdtest.Containerd) []imagebundle.Image {
	t.Helper()
	b, err := imagebundle.Open(path, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	var reported []imagebundle.Image
	images, err := imagebundle.Import(context.Background(), b, c.Endpoint(), func(img imagebundle.Image) { reported = append(reported, img) })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(images, reported) || len(images) != len(b.Images) {
		t.Errorf("Import returned %v and reported %v, want the bundle's %v", images, reported, b.Images)
	}
	return images
}

// checkUnpacked fails unless c holds every ref, unpacked in its default
// snapshotter, as the CRI needs.
func checkUnpacked(t *testing.T, c *containerdtest.Containerd, refs []string) {
	t.Helper()
	client, err := containerd.New(c.Socket, containerd.WithDefaultNamespace(imagebundle.Namespace))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Close() }()
	for _, ref := range refs {
		img, err := client.GetImage(context.Background(), ref)
		if err != nil {
			t.Fatalf("image %s after the import: %v", ref, err)
		}
		if ok, err := img.IsUnpacked(context.Background(), "overlayfs"); err != nil || !ok {
			t.Errorf("image %s is not unpacked in overlayfs: %v", ref, err)
		}
	}
}

// TestRoundTrip exports images from a registry (one of them picked from a
// multi-platform index), imports the bundle into a real containerd, where
// they are unpacked, exports them again from that containerd and gets the
// same bytes, and checks that ctr images import takes the bundle too.
func TestRoundTrip(t *testing.T) {
	refs := testImages(t)
	dir := t.TempDir()
	fromRegistry := export(t, dir, "registry.tar", imagebundle.ExportOptions{Refs: refs, From: imagebundle.FromRegistry})
	again := export(t, dir, "again.tar", imagebundle.ExportOptions{Refs: []string{refs[1], refs[0], refs[1]}, From: imagebundle.FromRegistry})
	first, second := read(t, fromRegistry), read(t, again)
	if !bytes.Equal(first, second) {
		t.Error("two exports of the same images differ")
	}
	checkMembers(t, first)

	c := containerdtest.Start(t)
	images := importBundle(t, fromRegistry, c)
	var got []string
	for _, img := range images {
		got = append(got, img.Ref)
	}
	if !slices.Equal(got, refs) {
		t.Errorf("imported %v, want %v", got, refs)
	}
	if listed := c.Images(t); !slices.Equal(listed, refs) {
		t.Errorf("ctr images ls: %v, want %v", listed, refs)
	}
	checkUnpacked(t, c, refs)

	fromRuntime := export(t, dir, "runtime.tar", imagebundle.ExportOptions{Refs: refs, From: imagebundle.FromRuntime, Endpoint: c.Endpoint()})
	if !bytes.Equal(read(t, fromRuntime), first) {
		t.Error("the export from the runtime differs from the export from the registry of the same images")
	}

	byCtr := containerdtest.Start(t)
	byCtr.Ctr(t, "images", "import", fromRegistry)
	if listed := byCtr.Images(t); !slices.Equal(listed, refs) {
		t.Errorf("ctr images import of the bundle: images %v, want %v", listed, refs)
	}
	checkUnpacked(t, byCtr, refs)
}

// read reads a file.
func read(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// checkMembers checks a bundle's members: sorted, regular, root's, dated
// the epoch.
func checkMembers(t *testing.T, bundle []byte) {
	t.Helper()
	var names []string
	tr := tar.NewReader(bytes.NewReader(bundle))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag != tar.TypeReg || hdr.Uid != 0 || hdr.ModTime.Unix() != 0 {
			t.Errorf("member %s: type %c, uid %d, mtime %v", hdr.Name, hdr.Typeflag, hdr.Uid, hdr.ModTime)
		}
		names = append(names, hdr.Name)
	}
	if !slices.IsSorted(names) || !slices.Contains(names, "index.json") || !slices.Contains(names, "oci-layout") {
		t.Errorf("members %v: want sorted, with index.json and oci-layout", names)
	}
}

// TestExportFromRuntimeNamesAMissingImage: an image the runtime lacks is a
// usage error naming it and the way out.
func TestExportFromRuntimeNamesAMissingImage(t *testing.T) {
	c := containerdtest.Start(t)
	_, err := imagebundle.Export(context.Background(), io.Discard, imagebundle.ExportOptions{Refs: []string{"registry.k8s.io/pause:3.10.2"}, Endpoint: c.Endpoint()})
	if exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), "registry.k8s.io/pause:3.10.2") || !strings.Contains(err.Error(), "--from registry") {
		t.Errorf("export of an image the runtime lacks: exit %d: %v", exit.Code(err), err)
	}
}

// badBundles writes, from a good bundle, one bundle per way a bundle goes
// bad, by name: an image's layer missing, a layer corrupt, a member with
// ../ or an absolute path, the file truncated. layer is a blob of the
// bundle's first image.
func badBundles(t testing.TB, good, layer, dir string) map[string]string {
	t.Helper()
	member := "blobs/sha256/" + strings.TrimPrefix(layer, "sha256:")
	bad := map[string]string{
		"missing layer": rewrite(t, good, dir, func(name string, data []byte) []byte {
			return map[bool][]byte{true: nil, false: data}[name == member]
		}),
		"corrupt layer": rewrite(t, good, dir, func(name string, data []byte) []byte {
			if name == member {
				data = slices.Clone(data)
				data[len(data)/2] ^= 0xff
			}
			return data
		}),
		"dot-dot member":  rewrite(t, good, dir, func(_ string, data []byte) []byte { return data }, "../evil"),
		"absolute member": rewrite(t, good, dir, func(_ string, data []byte) []byte { return data }, "/etc/evil"),
	}
	whole := read(t, good)
	for fault, size := range map[string]int{"truncated in a member": len(whole)/2 + 100, "truncated between members": len(whole) - 2048} {
		bad[fault] = filepath.Join(dir, strings.ReplaceAll(fault, " ", "-")+".tar")
		if err := os.WriteFile(bad[fault], whole[:size], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return bad
}

// rewrite writes a copy of a bundle whose members' bytes edit returns (nil:
// left out), then extra members.
func rewrite(t testing.TB, bundle, dir string, edit func(name string, data []byte) []byte, extra ...string) string {
	t.Helper()
	f, err := os.CreateTemp(dir, "bad-*.tar")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	tw := tar.NewWriter(f)
	tr := tar.NewReader(bytes.NewReader(read(t, bundle)))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		data, _ := io.ReadAll(tr)
		if data = edit(hdr.Name, data); data == nil {
			continue
		}
		write(t, tw, hdr.Name, data)
	}
	for _, name := range extra {
		write(t, tw, name, []byte("evil"))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// write writes a member.
func write(t testing.TB, tw *tar.Writer, name string, data []byte) {
	t.Helper()
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(data)), Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatal(err)
	}
}

// TestBadBundlesAreRefusedWhole: each bad bundle is refused by Open, before
// anything reaches containerd, with a usage error naming the file and,
// where the fault is an image's, the image; the containerd holds no image,
// no blob and no snapshot more than before.
func TestBadBundlesAreRefusedWhole(t *testing.T) {
	refs := testImages(t)
	dir := t.TempDir()
	good := export(t, dir, "good.tar", imagebundle.ExportOptions{Refs: refs, From: imagebundle.FromRegistry})
	img, err := remote.Image(parse(t, refs[1]))
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	layer, err := layers[1].Digest()
	if err != nil {
		t.Fatal(err)
	}
	c := containerdtest.Start(t)
	before := [][]string{c.Images(t), c.Content(t), c.Snapshots(t)}
	for fault, path := range badBundles(t, good, layer.String(), dir) {
		b, err := imagebundle.Open(path, "")
		if err == nil {
			_, _ = imagebundle.Import(context.Background(), b, c.Endpoint(), func(imagebundle.Image) {})
			t.Errorf("%s: Open accepted the bundle", fault)
			continue
		}
		msg := err.Error()
		if exit.Code(err) != exit.Usage || !strings.Contains(msg, path) {
			t.Errorf("%s: exit %d, want %d naming %s: %v", fault, exit.Code(err), exit.Usage, path, err)
		}
		if strings.Contains(fault, "layer") && !strings.Contains(msg, refs[1]) {
			t.Errorf("%s: the error does not name image %s: %v", fault, refs[1], err)
		}
		t.Logf("%s: %v", fault, err)
	}
	after := [][]string{c.Images(t), c.Content(t), c.Snapshots(t)}
	if !slices.EqualFunc(before, after, slices.Equal) {
		t.Errorf("containerd changed: images, content, snapshots before %v, after %v", before, after)
	}
	if !slices.Equal(after[0], nil) {
		t.Errorf("images %v after only bad bundles", after[0])
	}
}

// TestWriteImages: images held in memory make the bundle that an export
// of the same images from a registry makes, byte for byte, every time; it
// passes Open and a real containerd imports and unpacks it. A reference
// is normalized as export's are, and an image of another platform is
// refused.
func TestWriteImages(t *testing.T) {
	host := serveRegistry(t)
	images := map[string]v1.Image{
		host + "/kubeboot/mem-b:v1": randomImage(t, 20, 2, 4096, types.DockerLayer, runtime.GOARCH),
		host + "/kubeboot/mem-a:v2": randomImage(t, 21, 1, 2048, types.OCIUncompressedLayer, runtime.GOARCH),
	}
	refs := []string{host + "/kubeboot/mem-a:v2", host + "/kubeboot/mem-b:v1"} // sorted, as a bundle lists them
	var first, second bytes.Buffer
	written, err := imagebundle.WriteImages(context.Background(), &first, images, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := imagebundle.WriteImages(context.Background(), &second, images, ""); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.Bytes(), second.Bytes()) {
		t.Error("two writes of the same images differ")
	}
	checkMembers(t, first.Bytes())
	for ref, img := range images {
		push(t, ref, img)
	}
	dir := t.TempDir()
	exported := export(t, dir, "registry.tar", imagebundle.ExportOptions{Refs: refs, From: imagebundle.FromRegistry})
	if !bytes.Equal(read(t, exported), first.Bytes()) {
		t.Error("the bundle written from memory differs from the export of the same images from a registry")
	}

	path := filepath.Join(dir, "memory.tar")
	if err := os.WriteFile(path, first.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	c := containerdtest.Start(t)
	imported := importBundle(t, path, c)
	if !slices.Equal(imported, written) {
		t.Errorf("imported %v, want the written %v", imported, written)
	}
	if listed := c.Images(t); !slices.Equal(listed, refs) {
		t.Errorf("ctr images ls: %v, want %v", listed, refs)
	}
	checkUnpacked(t, c, refs)

	short, err := imagebundle.WriteImages(context.Background(), io.Discard, map[string]v1.Image{"busybox:1.37.0": images[refs[0]]}, "")
	if err != nil || len(short) != 1 || short[0].Ref != "docker.io/library/busybox:1.37.0" {
		t.Errorf("a short reference: %v, %v; want docker.io/library/busybox:1.37.0", short, err)
	}
	other := map[string]v1.Image{refs[0]: randomImage(t, 22, 1, 1024, types.DockerLayer, "s390x")}
	if _, err := imagebundle.WriteImages(context.Background(), io.Discard, other, "linux/amd64"); err == nil || !strings.Contains(err.Error(), "is for linux/s390x, not linux/amd64") {
		t.Errorf("an image of another platform: %v", err)
	}
}
