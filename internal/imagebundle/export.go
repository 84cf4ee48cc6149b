package imagebundle

import (
	"archive/tar"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kubeboot/kubeboot/internal/atomicfile"
	"github.com/kubeboot/kubeboot/internal/exit"
)

// Where export reads the images from.
const (
	// FromRuntime is the node's containerd (its content store).
	FromRuntime = "runtime"
	// FromRegistry is each image's registry.
	FromRegistry = "registry"
)

// ExportOptions say which images export writes and where it reads them.
type ExportOptions struct {
	// Refs are the images' references.
	Refs []string
	// From is FromRuntime or FromRegistry.
	From string
	// Endpoint is the runtime's socket URL, for FromRuntime.
	Endpoint string
	// Platform (os/arch[/variant]) picks the manifest of a multi-platform
	// image; every image must be of it. "" is DefaultPlatform.
	Platform string
}

// ExportFile writes the bundle of opts' images to path, replacing it only
// once it is written whole, and returns the images in the index's order.
func ExportFile(ctx context.Context, path string, opts ExportOptions) ([]Image, error) {
	f, err := atomicfile.Create(path, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--out %q: %w", path, err)
	}
	defer f.Abort()
	images, err := Export(ctx, f, opts)
	if err != nil {
		return nil, err
	}
	if err := f.Commit(); err != nil {
		return nil, fmt.Errorf("--out %q: %w", path, err)
	}
	return images, nil
}

// Export writes the bundle of opts' images to w and returns the images in
// the index's order. Every image is resolved before anything is written.
func Export(ctx context.Context, w io.Writer, opts ExportOptions) ([]Image, error) {
	platform, err := parsePlatform(cmp.Or(opts.Platform, DefaultPlatform()))
	if err != nil {
		return nil, err
	}
	src, closeSource, err := openSource(opts)
	if err != nil {
		return nil, err
	}
	defer closeSource()
	refs, err := normalizeAll(opts.Refs)
	if err != nil {
		return nil, err
	}
	return writeBundle(ctx, w, src, refs, platform)
}

// writeBundle resolves refs (normalized, sorted, each once) in src for
// platform, then writes their bundle to w and returns the images in the
// index's order: what every source's export shares.
func writeBundle(ctx context.Context, w io.Writer, src source, refs []string, platform ocispec.Platform) ([]Image, error) {
	var images []*image
	for _, ref := range refs {
		img, err := src.image(ctx, ref, platform)
		if err != nil {
			return nil, err
		}
		images = append(images, img)
	}
	if err := write(ctx, w, src, images); err != nil {
		return nil, err
	}
	return summary(images), nil
}

// openSource is the source opts name, and how to close it.
func openSource(opts ExportOptions) (source, func(), error) {
	switch opts.From {
	case FromRegistry:
		r, err := newRegistry()
		return r, func() {}, err
	case FromRuntime, "":
		endpoint := cmp.Or(opts.Endpoint, DefaultEndpoint)
		c, err := dial(endpoint)
		if err != nil {
			return nil, nil, err
		}
		return runtimeStore{client: c, endpoint: endpoint}, func() { _ = c.Close() }, nil
	}
	return nil, nil, &exit.UsageError{Msg: fmt.Sprintf("--from %q: want %s (the node's containerd) or %s", opts.From, FromRuntime, FromRegistry)}
}

// normalizeAll is refs normalized, sorted, without duplicates.
func normalizeAll(refs []string) ([]string, error) {
	if len(refs) == 0 {
		return nil, &exit.UsageError{Msg: "no image to export: name the images, or give --config"}
	}
	var out []string
	for _, ref := range refs {
		full, err := normalize(ref)
		if err != nil {
			return nil, err
		}
		out = append(out, full)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// summary is the images as a bundle's index lists them.
func summary(images []*image) []Image {
	var out []Image
	for _, img := range images {
		size := img.desc.Size
		for _, b := range img.blobs {
			size += b.Size
		}
		out = append(out, Image{Ref: img.ref, Digest: img.desc.Digest.String(), Size: size})
	}
	return out
}

// write writes the bundle: the blobs, sorted by digest and each once, then
// index.json and oci-layout.
func write(ctx context.Context, w io.Writer, src source, images []*image) error {
	tw := tar.NewWriter(w)
	for _, b := range blobsOf(images) {
		if err := writeBlob(ctx, tw, src, b); err != nil {
			return err
		}
	}
	index, err := json.Marshal(indexOf(images))
	if err != nil {
		return err
	}
	layout, err := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	if err != nil {
		return err
	}
	if err := writeMember(tw, indexFile, index); err != nil {
		return err
	}
	if err := writeMember(tw, layoutFile, layout); err != nil {
		return err
	}
	return tw.Close()
}

// blob is one blob to write: its descriptor, the image it is read for,
// and its bytes if they are in memory (a manifest).
type blob struct {
	desc ocispec.Descriptor
	ref  string
	data []byte
}

// blobsOf is every blob of the images, once each, sorted by digest.
func blobsOf(images []*image) []blob {
	byDigest := map[digest.Digest]blob{}
	for _, img := range images {
		byDigest[img.desc.Digest] = blob{desc: img.desc, ref: img.ref, data: img.manifest}
		for _, d := range img.blobs {
			if _, ok := byDigest[d.Digest]; !ok {
				byDigest[d.Digest] = blob{desc: d, ref: img.ref}
			}
		}
	}
	blobs := make([]blob, 0, len(byDigest))
	for _, b := range byDigest {
		blobs = append(blobs, b)
	}
	slices.SortFunc(blobs, func(a, b blob) int { return strings.Compare(string(a.desc.Digest), string(b.desc.Digest)) })
	return blobs
}

// writeBlob copies a blob into the tar, checking its size and digest.
func writeBlob(ctx context.Context, tw *tar.Writer, src source, b blob) error {
	if b.data != nil {
		return writeMember(tw, blobDir+b.desc.Digest.Encoded(), b.data)
	}
	rc, err := src.open(ctx, b.ref, b.desc)
	if err != nil {
		return err
	}
	defer func() { _ = rc.Close() }()
	if err := tw.WriteHeader(header(blobDir+b.desc.Digest.Encoded(), b.desc.Size)); err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tw, h), io.LimitReader(rc, b.desc.Size))
	if err != nil {
		return fmt.Errorf("image %s: blob %s: %w", b.ref, b.desc.Digest, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != b.desc.Size || got != b.desc.Digest.Encoded() {
		return fmt.Errorf("image %s: blob %s: its source gave %d bytes of digest sha256:%s, not the %d its manifest names", b.ref, b.desc.Digest, n, got, b.desc.Size)
	}
	return nil
}

// writeMember writes one member held in memory.
func writeMember(tw *tar.Writer, name string, data []byte) error {
	if err := tw.WriteHeader(header(name, int64(len(data)))); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// header is a member's header: a regular file, root's, mode 0644, dated
// the Unix epoch, so that the same images give the same bytes.
func header(name string, size int64) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
}

// indexOf is the bundle's index.json: a manifest per image, annotated with
// its reference and tag.
func indexOf(images []*image) ocispec.Index {
	index := ocispec.Index{MediaType: ocispec.MediaTypeImageIndex, Manifests: []ocispec.Descriptor{}}
	index.SchemaVersion = 2
	for _, img := range images {
		desc := img.desc
		desc.Annotations = map[string]string{AnnotationImageName: img.ref}
		if tag := tagOf(img.ref); tag != "" {
			desc.Annotations[ocispec.AnnotationRefName] = tag
		}
		index.Manifests = append(index.Manifests, desc)
	}
	return index
}
