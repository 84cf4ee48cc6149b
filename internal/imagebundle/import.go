package imagebundle

import (
	"cmp"
	"context"
	"fmt"
	"io"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/platforms"
)

// Import loads a bundle that Open verified into the containerd at endpoint
// ("" is DefaultEndpoint), in namespace k8s.io, and unpacks each image
// into that containerd's default snapshotter, as `ctr -n k8s.io images
// import` does, so that the CRI runs them without a pull. unpacked is
// called with each image once it is unpacked; Import returns them all.
func Import(ctx context.Context, b *Bundle, endpoint string, unpacked func(Image)) ([]Image, error) {
	endpoint = cmp.Or(endpoint, DefaultEndpoint)
	client, err := dial(endpoint)
	if err != nil {
		return nil, err
	}
	defer func() { _ = client.Close() }()
	// One lease over the import and the unpacks, so that no blob or
	// snapshot is collected before its image holds it.
	ctx, done, err := client.WithLease(ctx)
	if err != nil {
		return nil, fmt.Errorf("import image bundle %q into containerd %q: %w", b.Path, endpoint, err)
	}
	defer func() { _ = done(ctx) }()
	if _, err := b.file.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	match := platforms.OnlyStrict(b.Platform)
	stored, err := client.Import(ctx, b.file, containerd.WithImportPlatform(match))
	if err != nil {
		return nil, fmt.Errorf("import image bundle %q into containerd %q: %w", b.Path, endpoint, err)
	}
	byRef := map[string]Image{}
	for _, img := range b.Images {
		byRef[img.Ref] = img
	}
	var images []Image
	for _, s := range stored {
		if err := containerd.NewImageWithPlatform(client, s, match).Unpack(ctx, ""); err != nil {
			return images, fmt.Errorf("unpack image %s from bundle %q in containerd %q: %w", s.Name, b.Path, endpoint, err)
		}
		img := byRef[s.Name]
		unpacked(img)
		images = append(images, img)
	}
	return images, nil
}
