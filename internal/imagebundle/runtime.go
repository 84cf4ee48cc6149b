package imagebundle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kubeboot/kubeboot/internal/exit"
)

// dial connects to the containerd at endpoint, a unix socket URL, in the
// CRI's namespace.
func dial(endpoint string) (*containerd.Client, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "unix" || u.Path == "" {
		return nil, &exit.UsageError{Msg: fmt.Sprintf("--runtime-endpoint %q: want containerd's unix socket URL, such as %s", endpoint, DefaultEndpoint)}
	}
	if info, err := os.Stat(u.Path); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("connect to containerd %q: no socket %s: is containerd running? (or give its socket with --runtime-endpoint)", endpoint, u.Path)
	} else if err != nil || info.Mode().Type() != fs.ModeSocket {
		return nil, fmt.Errorf("connect to containerd %q: %s is not a socket", endpoint, u.Path)
	}
	c, err := containerd.New(u.Path, containerd.WithDefaultNamespace(Namespace))
	if err != nil {
		return nil, fmt.Errorf("connect to containerd %q: %w", endpoint, err)
	}
	return c, nil
}

// runtimeStore reads images from containerd's image and content stores.
type runtimeStore struct {
	client   *containerd.Client
	endpoint string
}

// image looks ref up in the runtime, picking platform's manifest from an
// index, and checks that the runtime holds all its blobs.
func (r runtimeStore) image(ctx context.Context, ref string, platform ocispec.Platform) (*image, error) {
	stored, err := r.client.ImageService().Get(ctx, ref)
	if errdefs.IsNotFound(err) {
		return nil, &exit.UsageError{Msg: fmt.Sprintf("image %s is not in the runtime (%s, namespace %s): pull it first (kubeboot images pull) or export with --from registry", ref, r.endpoint, Namespace)}
	}
	if err != nil {
		return nil, fmt.Errorf("image %s: from the runtime: %w", ref, err)
	}
	desc := stored.Target
	store := r.client.ContentStore()
	raw, err := content.ReadBlob(ctx, store, desc)
	if err != nil {
		return nil, r.blobError(ref, desc, err)
	}
	if indexTypes[desc.MediaType] {
		if desc, err = pickManifest(ref, raw, platform); err != nil {
			return nil, err
		}
		if raw, err = content.ReadBlob(ctx, store, desc); err != nil {
			return nil, r.blobError(ref, desc, err)
		}
	}
	if !manifestTypes[desc.MediaType] {
		return nil, fmt.Errorf("image %s: the runtime holds a %s, not an image manifest", ref, desc.MediaType)
	}
	m, err := parseManifest(raw)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	config, err := content.ReadBlob(ctx, store, m.Config)
	if err != nil {
		return nil, r.blobError(ref, m.Config, err)
	}
	img, err := newImage(ref, desc.MediaType, raw, config, platform)
	if err != nil {
		return nil, err
	}
	for _, layer := range m.Layers {
		if _, err := store.Info(ctx, layer.Digest); err != nil {
			return nil, r.blobError(ref, layer, err)
		}
	}
	return img, nil
}

// blobError says that the runtime could not give a blob of ref's.
func (r runtimeStore) blobError(ref string, desc ocispec.Descriptor, err error) error {
	if errdefs.IsNotFound(err) {
		return &exit.UsageError{Msg: fmt.Sprintf("image %s: the runtime (%s) lacks its blob %s (a layer kept only unpacked, or another platform's): export with --from registry", ref, r.endpoint, desc.Digest)}
	}
	return fmt.Errorf("image %s: blob %s from the runtime: %w", ref, desc.Digest, err)
}

// open streams a blob from the content store.
func (r runtimeStore) open(ctx context.Context, ref string, desc ocispec.Descriptor) (io.ReadCloser, error) {
	ra, err := r.client.ContentStore().ReaderAt(ctx, desc)
	if err != nil {
		return nil, r.blobError(ref, desc, err)
	}
	return readerAt{Reader: content.NewReader(ra), Closer: ra}, nil
}

// readerAt reads a content.ReaderAt from its start and closes it.
type readerAt struct {
	io.Reader
	io.Closer
}
