package imagebundle

import (
	"context"
	"fmt"
	"io"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// registry reads images from their registries, with the credentials of
// the docker config (~/.docker/config.json) when it has some. A registry on
// localhost or a private address is spoken to over plain HTTP, as
// go-containerregistry does.
type registry struct {
	// puller keeps each repository's token and connections across requests.
	puller *remote.Puller
}

// newRegistry is a registry source.
func newRegistry() (registry, error) {
	p, err := remote.NewPuller(remote.WithAuthFromKeychain(authn.DefaultKeychain))
	return registry{puller: p}, err
}

// options are the registry requests' options.
func (r registry) options(ctx context.Context) []remote.Option {
	return []remote.Option{remote.WithContext(ctx), remote.Reuse(r.puller)}
}

// image resolves ref in its registry, picking platform's manifest from an
// index.
func (r registry) image(ctx context.Context, ref string, platform ocispec.Platform) (*image, error) {
	parsed, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	desc, err := remote.Get(parsed, r.options(ctx)...)
	if err != nil {
		return nil, fmt.Errorf("image %s: from its registry: %w", ref, err)
	}
	if indexTypes[string(desc.MediaType)] {
		m, err := pickManifest(ref, desc.Manifest, platform)
		if err != nil {
			return nil, err
		}
		if desc, err = remote.Get(parsed.Context().Digest(m.Digest.String()), r.options(ctx)...); err != nil {
			return nil, fmt.Errorf("image %s: manifest %s from its registry: %w", ref, m.Digest, err)
		}
	}
	if !manifestTypes[string(desc.MediaType)] {
		return nil, fmt.Errorf("image %s: its registry serves a %s, not an image manifest", ref, desc.MediaType)
	}
	img, err := desc.Image()
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %s: config from its registry: %w", ref, err)
	}
	return newImage(ref, string(desc.MediaType), desc.Manifest, config, platform)
}

// open streams a blob of ref's repository.
func (r registry) open(ctx context.Context, ref string, desc ocispec.Descriptor) (io.ReadCloser, error) {
	parsed, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	layer, err := remote.Layer(parsed.Context().Digest(desc.Digest.String()), r.options(ctx)...)
	if err != nil {
		return nil, fmt.Errorf("image %s: blob %s from its registry: %w", ref, desc.Digest, err)
	}
	rc, err := layer.Compressed()
	if err != nil {
		return nil, fmt.Errorf("image %s: blob %s from its registry: %w", ref, desc.Digest, err)
	}
	return rc, nil
}
