package imagebundle

import (
	"archive/tar"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/containerd/platforms"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/inputfile"
)

// The limits of what Open reads.
const (
	// Limit caps a bundle: the images of a control plane are a few
	// hundred MiB; 64 GiB refuses a disk image or a device by mistake.
	Limit = 64 << 30
	// metadataLimit caps index.json, oci-layout, a manifest and a config,
	// which Open reads into memory: each is a few KiB.
	metadataLimit = 4 << 20
)

// Bundle is a bundle file that Open verified whole, held open for Import.
type Bundle struct {
	// Path is the file's path, as the user gave it.
	Path string
	// Images are its images, in the index's order.
	Images []Image
	// Platform is the platform its images were checked to be of.
	Platform ocispec.Platform

	file *os.File
}

// Close closes the bundle's file.
func (b *Bundle) Close() error { return b.file.Close() }

// member is what Open learned of a member: where its bytes are in the
// file, how many, and for a blob whether they match its name's digest.
type member struct {
	offset, size int64
	corrupt      bool
}

// Open reads the bundle at path and verifies it whole: a regular file, a
// complete tar whose members are only oci-layout, index.json and
// blobs/sha256/<hex>, every blob's bytes of the digest its name says, and
// every image of the index complete (its manifest, config and layers
// present, of the sizes the manifest names) and of platform ("" is
// DefaultPlatform), named by a reference. What fails is a usage error
// naming the file and the image. The caller closes the bundle.
func Open(path, platform string) (*Bundle, error) {
	p, err := parsePlatform(cmp.Or(platform, DefaultPlatform()))
	if err != nil {
		return nil, err
	}
	f, err := inputfile.Open(path, Limit)
	if err != nil {
		return nil, &exit.UsageError{Msg: fmt.Sprintf("image bundle: %v", err)}
	}
	b := &Bundle{Path: path, Platform: p, file: f}
	if err := b.verify(); err != nil {
		_ = f.Close()
		return nil, err
	}
	return b, nil
}

// bundleError is a usage error about the bundle, saying how to fix it.
func (b *Bundle) bundleError(format string, args ...any) error {
	return &exit.UsageError{Msg: fmt.Sprintf("image bundle %q: ", b.Path) + fmt.Sprintf(format, args...) +
		": nothing was imported; export the bundle again (kubeboot images export) and copy it whole"}
}

// verify reads every member, then checks the index's images.
func (b *Bundle) verify() error {
	members, err := b.scan()
	if err != nil {
		return err
	}
	for _, required := range []string{layoutFile, indexFile} {
		if _, ok := members[required]; !ok {
			return b.bundleError("no %s: not an OCI image layout", required)
		}
	}
	var layout ocispec.ImageLayout
	if err := b.readJSON(members, layoutFile, &layout); err != nil {
		return err
	}
	if layout.Version != ocispec.ImageLayoutVersion {
		return b.bundleError("%s: layout version %q, want %q", layoutFile, layout.Version, ocispec.ImageLayoutVersion)
	}
	var index ocispec.Index
	if err := b.readJSON(members, indexFile, &index); err != nil {
		return err
	}
	if len(index.Manifests) == 0 {
		return b.bundleError("%s lists no image", indexFile)
	}
	for _, desc := range index.Manifests {
		img, err := b.checkImage(members, desc)
		if err != nil {
			return err
		}
		b.Images = append(b.Images, img)
	}
	for name, m := range members {
		if m.corrupt {
			return b.bundleError("member %s is corrupt: its bytes do not match its digest", name)
		}
	}
	return nil
}

// scan reads the tar once, checking each member's name and type and each
// blob's digest.
func (b *Bundle) scan() (map[string]member, error) {
	counter := &countingReader{r: b.file}
	tr := tar.NewReader(counter)
	members := map[string]member{}
	// end is where the last member's bytes end, padded to tar's blocks.
	var end int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) && counter.n < end+2*512 {
			return nil, b.bundleError("truncated: it ends without the tar's end-of-archive blocks, after %d members", len(members))
		}
		if errors.Is(err, io.EOF) {
			return members, nil
		}
		if err != nil {
			return nil, b.bundleError("truncated, or not a tar archive: %v", err)
		}
		if sparse(hdr) {
			return nil, b.bundleError("member %q is a sparse file", hdr.Name)
		}
		name, err := b.checkName(hdr)
		if err != nil || name == "" {
			return nil, err
		}
		if _, dup := members[name]; dup {
			return nil, b.bundleError("member %q appears twice", hdr.Name)
		}
		m := member{offset: counter.n, size: hdr.Size}
		h := sha256.New()
		if _, err := io.Copy(h, tr); err != nil {
			return nil, b.bundleError("member %q is truncated: %v", hdr.Name, err)
		}
		if encoded, ok := strings.CutPrefix(name, blobDir); ok {
			m.corrupt = hex.EncodeToString(h.Sum(nil)) != encoded
		}
		members[name] = m
		end = m.offset + (m.size+511)/512*512
	}
}

// checkName refuses a member that is no part of a bundle: a path outside
// it, a link or a device, a file not of the layout. It returns the
// member's clean name, or "" for a directory of the layout, which it skips.
func (b *Bundle) checkName(hdr *tar.Header) (string, error) {
	name := path.Clean(hdr.Name)
	if path.IsAbs(hdr.Name) || name == ".." || strings.HasPrefix(name, "../") || slices.Contains(strings.Split(hdr.Name, "/"), "..") {
		return "", b.bundleError("member %q is a path outside the bundle (absolute or with ..)", hdr.Name)
	}
	switch {
	case hdr.Typeflag == tar.TypeDir && (name == "." || name == ocispec.ImageBlobsDir || name+"/" == blobDir):
		return "", nil
	case hdr.Typeflag != tar.TypeReg:
		return "", b.bundleError("member %q is not a regular file (tar type %q)", hdr.Name, hdr.Typeflag)
	case name == layoutFile || name == indexFile:
		return name, nil
	}
	encoded, ok := strings.CutPrefix(name, blobDir)
	if !ok || len(encoded) != 64 || strings.Trim(encoded, "0123456789abcdef") != "" {
		return "", b.bundleError("member %q is no part of an OCI image layout of sha256 blobs", hdr.Name)
	}
	return name, nil
}

// sparse says whether a member is a GNU sparse file, whose bytes in the
// archive are not its contents.
func sparse(hdr *tar.Header) bool {
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return hdr.Typeflag == tar.TypeGNUSparse
}

// readJSON decodes a member held in memory: index.json, oci-layout, a
// manifest or a config.
func (b *Bundle) readJSON(members map[string]member, name string, v any) error {
	data, err := b.read(members[name])
	if err == nil {
		err = json.Unmarshal(data, v)
	}
	if err != nil {
		return b.bundleError("%s: %v", name, err)
	}
	return nil
}

// read reads a small member's bytes.
func (b *Bundle) read(m member) ([]byte, error) {
	if m.size > metadataLimit {
		return nil, fmt.Errorf("%d bytes, more than the %d a manifest or config may have", m.size, metadataLimit)
	}
	data := make([]byte, m.size)
	_, err := b.file.ReadAt(data, m.offset)
	return data, err
}

// checkImage checks one image of the index: its reference, its manifest,
// its platform and that its blobs are all there, whole.
func (b *Bundle) checkImage(members map[string]member, desc ocispec.Descriptor) (Image, error) {
	ref, err := normalize(desc.Annotations[AnnotationImageName])
	if err != nil {
		return Image{}, b.bundleError("%s: manifest %s is not named by its %s annotation", indexFile, desc.Digest, AnnotationImageName)
	}
	if !manifestTypes[desc.MediaType] {
		return Image{}, b.bundleError("image %s: a %s, not a single-platform image manifest", ref, desc.MediaType)
	}
	name, err := b.blobOf(members, ref, "manifest", desc)
	if err != nil {
		return Image{}, err
	}
	data, err := b.read(members[name])
	if err != nil {
		return Image{}, b.bundleError("image %s: manifest %s: %v", ref, desc.Digest, err)
	}
	m, err := parseManifest(data)
	if err != nil {
		return Image{}, b.bundleError("image %s: %v", ref, err)
	}
	size := desc.Size
	for i, d := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		what := "layer"
		if i == 0 {
			what = "config"
		}
		if _, err := b.blobOf(members, ref, what, d); err != nil {
			return Image{}, err
		}
		size += d.Size
	}
	if err := b.checkPlatform(members, ref, m.Config); err != nil {
		return Image{}, err
	}
	return Image{Ref: ref, Digest: desc.Digest.String(), Size: size}, nil
}

// blobOf is the member of one of ref's blobs, which must be present, whole
// and of the size its descriptor names.
func (b *Bundle) blobOf(members map[string]member, ref, what string, desc ocispec.Descriptor) (string, error) {
	if desc.Digest.Validate() != nil || desc.Digest.Algorithm() != "sha256" {
		return "", b.bundleError("image %s: %s %q: not a sha256 digest", ref, what, desc.Digest)
	}
	name := blobDir + desc.Digest.Encoded()
	m, ok := members[name]
	switch {
	case !ok:
		return "", b.bundleError("image %s: its %s %s is missing", ref, what, desc.Digest)
	case m.corrupt:
		return "", b.bundleError("image %s: its %s %s is corrupt (its bytes do not match its digest)", ref, what, desc.Digest)
	case m.size != desc.Size:
		return "", b.bundleError("image %s: its %s %s has %d bytes, not the %d its manifest names", ref, what, desc.Digest, m.size, desc.Size)
	}
	return name, nil
}

// checkPlatform refuses an image not of the bundle's platform.
func (b *Bundle) checkPlatform(members map[string]member, ref string, config ocispec.Descriptor) error {
	data, err := b.read(members[blobDir+config.Digest.Encoded()])
	if err != nil {
		return b.bundleError("image %s: config %s: %v", ref, config.Digest, err)
	}
	p, err := configPlatform(data)
	if err != nil {
		return b.bundleError("image %s: config %s: %v", ref, config.Digest, err)
	}
	if !platforms.OnlyStrict(b.Platform).Match(p) {
		return b.bundleError("image %s is for %s, not the node's %s (--platform)", ref, platforms.Format(p), platforms.Format(b.Platform))
	}
	return nil
}

// countingReader counts the bytes read through it: after tar's Next, the
// offset of the member's bytes in the file.
type countingReader struct {
	r io.Reader
	n int64
}

// Read reads and counts.
func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
