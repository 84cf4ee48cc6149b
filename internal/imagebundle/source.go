package imagebundle

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/containerd/platforms"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// source is where export reads images from: a registry, the runtime, or
// the caller's memory (WriteImages).
type source interface {
	// image resolves ref (normalized) to its manifest for platform.
	image(ctx context.Context, ref string, platform ocispec.Platform) (*image, error)
	// open streams one of an image's blobs.
	open(ctx context.Context, ref string, desc ocispec.Descriptor) (io.ReadCloser, error)
}

// image is one image as export writes it: its manifest, raw, and the
// blobs it names.
type image struct {
	ref      string
	manifest []byte
	// desc is the manifest's descriptor, with the image's platform.
	desc ocispec.Descriptor
	// blobs are the config and the layers.
	blobs []ocispec.Descriptor
}

// manifestTypes are the media types of a single-platform image manifest.
var manifestTypes = map[string]bool{
	ocispec.MediaTypeImageManifest:                         true,
	"application/vnd.docker.distribution.manifest.v2+json": true,
}

// indexTypes are the media types of a multi-platform index.
var indexTypes = map[string]bool{
	ocispec.MediaTypeImageIndex:                                 true,
	"application/vnd.docker.distribution.manifest.list.v2+json": true,
}

// newImage reads an image's manifest (raw, of mediaType) and config: the
// blobs it names and its platform, which must be platform.
func newImage(ref, mediaType string, manifest, config []byte, platform ocispec.Platform) (*image, error) {
	m, err := parseManifest(manifest)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	p, err := configPlatform(config)
	if err != nil {
		return nil, fmt.Errorf("image %s: config %s: %w", ref, m.Config.Digest, err)
	}
	if !platforms.OnlyStrict(platform).Match(p) {
		return nil, fmt.Errorf("image %s is for %s, not %s: export it for the node's platform (--platform)", ref, platforms.Format(p), platforms.Format(platform))
	}
	desc := ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(manifest), Size: int64(len(manifest)), Platform: &p}
	return &image{ref: ref, manifest: manifest, desc: desc, blobs: append([]ocispec.Descriptor{m.Config}, m.Layers...)}, nil
}

// parseManifest decodes an image manifest, whose config and layers must
// be named by sha256 digests.
func parseManifest(data []byte) (ocispec.Manifest, error) {
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("manifest: %w", err)
	}
	for _, d := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		if d.Digest.Algorithm() != digest.SHA256 || d.Digest.Validate() != nil || d.Size < 0 {
			return m, fmt.Errorf("manifest names blob %q of %d bytes: want a sha256 digest and a size", d.Digest, d.Size)
		}
	}
	return m, nil
}

// configPlatform is the platform an image config declares.
func configPlatform(config []byte) (ocispec.Platform, error) {
	var c ocispec.Image
	if err := json.Unmarshal(config, &c); err != nil {
		return ocispec.Platform{}, err
	}
	return platforms.Normalize(c.Platform), nil
}

// pickManifest is the descriptor in an index of the manifest for platform.
func pickManifest(ref string, index []byte, platform ocispec.Platform) (ocispec.Descriptor, error) {
	var idx ocispec.Index
	if err := json.Unmarshal(index, &idx); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("image %s: index: %w", ref, err)
	}
	match := platforms.OnlyStrict(platform)
	for _, m := range idx.Manifests {
		if m.Platform != nil && match.Match(*m.Platform) && manifestTypes[m.MediaType] {
			return m, nil
		}
	}
	return ocispec.Descriptor{}, fmt.Errorf("image %s has no manifest for %s: export for a platform it has (--platform)", ref, platforms.Format(platform))
}
