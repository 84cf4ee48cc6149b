// Package cri talks to the node's container runtime through the CRI image
// service, as the kubelet does: which of the images a node needs the
// runtime holds, and pulling the ones it lacks.
package cri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ErrNoRuntime is a runtime endpoint whose socket does not exist: nothing
// runs there yet.
var ErrNoRuntime = errors.New("no container runtime listens there")

// Images is a client of a runtime's image service.
type Images struct {
	endpoint string
	conn     *grpc.ClientConn
	client   runtimeapi.ImageServiceClient
}

// Dial connects to the runtime at endpoint, a unix socket URL like
// unix:///run/containerd/containerd.sock; socketPath maps the socket's node
// path to this machine's. A missing socket is ErrNoRuntime. Close the
// client when done.
func Dial(endpoint string, socketPath func(string) string) (*Images, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "unix" {
		return nil, fmt.Errorf("connect to container runtime %q: want a unix socket URL", endpoint)
	}
	sock := socketPath(u.Path)
	if info, err := os.Stat(sock); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("connect to container runtime %q: %w", endpoint, ErrNoRuntime)
	} else if err != nil || info.Mode().Type() != fs.ModeSocket {
		return nil, fmt.Errorf("connect to container runtime %q: %s is not a socket", endpoint, sock)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("connect to container runtime %q: %w", endpoint, err)
	}
	return &Images{endpoint: endpoint, conn: conn, client: runtimeapi.NewImageServiceClient(conn)}, nil
}

// Close closes the connection.
func (i *Images) Close() error { return i.conn.Close() }

// Missing returns the refs the runtime does not hold, in order.
func (i *Images) Missing(ctx context.Context, refs []string) ([]string, error) {
	var missing []string
	for _, ref := range refs {
		resp, err := i.client.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		if err != nil {
			return nil, fmt.Errorf("ask container runtime %q for image %q: %w", i.endpoint, ref, err)
		}
		if resp.GetImage() == nil {
			missing = append(missing, ref)
		}
	}
	return missing, nil
}

// Pull makes the runtime pull ref, as the kubelet would, and returns the
// image's ID.
func (i *Images) Pull(ctx context.Context, ref string) (string, error) {
	resp, err := i.client.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		return "", fmt.Errorf("pull image %q through container runtime %q: %w", ref, i.endpoint, err)
	}
	return resp.GetImageRef(), nil
}
