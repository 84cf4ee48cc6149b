package imagebundle

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// WriteImages writes the bundle of images the caller holds in memory
// (go-containerregistry's v1.Image), by reference, to w, in the format and
// order Export writes, and returns them in the index's order. Every image
// must be of platform ("" is DefaultPlatform).
func WriteImages(ctx context.Context, w io.Writer, images map[string]v1.Image, platform string) ([]Image, error) {
	p, err := parsePlatform(cmp.Or(platform, DefaultPlatform()))
	if err != nil {
		return nil, err
	}
	src := memory{}
	for ref, img := range images {
		full, err := normalize(ref)
		if err != nil {
			return nil, err
		}
		if _, dup := src[full]; dup {
			return nil, fmt.Errorf("image %s: named twice", full)
		}
		src[full] = img
	}
	if len(src) == 0 {
		return nil, errors.New("no image to write")
	}
	refs := slices.Sorted(maps.Keys(src))
	return writeBundle(ctx, w, src, refs, p)
}

// memory is a source of images held in memory, by full reference.
type memory map[string]v1.Image

// image reads ref's manifest and config.
func (m memory) image(_ context.Context, ref string, platform ocispec.Platform) (*image, error) {
	img := m[ref]
	manifest, err := img.RawManifest()
	if err != nil {
		return nil, fmt.Errorf("image %s: manifest: %w", ref, err)
	}
	mediaType, err := img.MediaType()
	if err != nil {
		return nil, fmt.Errorf("image %s: manifest: %w", ref, err)
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %s: config: %w", ref, err)
	}
	return newImage(ref, string(mediaType), manifest, config, platform)
}

// open streams ref's config or one of its layers, as stored (compressed).
func (m memory) open(_ context.Context, ref string, desc ocispec.Descriptor) (io.ReadCloser, error) {
	img := m[ref]
	hash, err := v1.NewHash(desc.Digest.String())
	if err != nil {
		return nil, fmt.Errorf("image %s: blob %s: %w", ref, desc.Digest, err)
	}
	if name, err := img.ConfigName(); err == nil && name == hash {
		config, err := img.RawConfigFile()
		if err != nil {
			return nil, fmt.Errorf("image %s: config: %w", ref, err)
		}
		return io.NopCloser(bytes.NewReader(config)), nil
	}
	layer, err := img.LayerByDigest(hash)
	if err != nil {
		return nil, fmt.Errorf("image %s: blob %s: %w", ref, desc.Digest, err)
	}
	rc, err := layer.Compressed()
	if err != nil {
		return nil, fmt.Errorf("image %s: blob %s: %w", ref, desc.Digest, err)
	}
	return rc, nil
}
