// Package cri talks to the node's container runtime through the CRI, as the
// kubelet does: whether it serves the CRI, which of the images a node needs
// it holds, pulling the ones it lacks, a static pod's container log for a
// diagnosis, which pods it still runs, and removing them all at reset.
package cri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ErrNoRuntime is a runtime endpoint whose socket does not exist: nothing
// runs there yet.
var ErrNoRuntime = errors.New("no container runtime listens there")

// Client is a client of a runtime's image and runtime services.
type Client struct {
	endpoint string
	conn     *grpc.ClientConn
	images   runtimeapi.ImageServiceClient
	runtime  runtimeapi.RuntimeServiceClient
	// mapPath maps a node path to this machine's.
	mapPath func(string) string
}

// Dial connects to the runtime at endpoint, a unix socket URL like
// unix:///run/containerd/containerd.sock; socketPath maps the socket's node
// path (and the log files') to this machine's. A missing socket is ErrNoRuntime. Close the
// client when done.
func Dial(endpoint string, socketPath func(string) string) (*Client, error) {
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
	return &Client{endpoint: endpoint, conn: conn, images: runtimeapi.NewImageServiceClient(conn), runtime: runtimeapi.NewRuntimeServiceClient(conn), mapPath: socketPath}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Missing returns the refs the runtime does not hold, in order.
func (c *Client) Missing(ctx context.Context, refs []string) ([]string, error) {
	var missing []string
	for _, ref := range refs {
		resp, err := c.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		if err != nil {
			return nil, fmt.Errorf("ask container runtime %q for image %q: %w", c.endpoint, ref, err)
		}
		if resp.GetImage() == nil {
			missing = append(missing, ref)
		}
	}
	return missing, nil
}

// Pull makes the runtime pull ref, as the kubelet would, and returns the
// image's ID.
func (c *Client) Pull(ctx context.Context, ref string) (string, error) {
	resp, err := c.images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		return "", fmt.Errorf("pull image %q through container runtime %q: %w", ref, c.endpoint, err)
	}
	return resp.GetImageRef(), nil
}

// Reporter receives progress, such as each image PullMissing pulled.
type Reporter interface {
	// Infof reports progress.
	Infof(format string, args ...any)
}

// PullResult is what PullMissing did with each image, in the order given.
type PullResult struct {
	// Pulled are the images the runtime pulled.
	Pulled []string `json:"pulled"`
	// Present are the images the runtime held already.
	Present []string `json:"present"`
}

// PullMissing makes the runtime pull, one at a time and in order, each of
// refs it lacks, as the kubelet would, and reports every image: present,
// or pulled with its ID. On an error it returns, with it, what it did
// before.
func (c *Client) PullMissing(ctx context.Context, refs []string, report Reporter) (PullResult, error) {
	res := PullResult{Pulled: []string{}, Present: []string{}}
	missing, err := c.Missing(ctx, refs)
	if err != nil {
		return res, err
	}
	for _, ref := range refs {
		if !slices.Contains(missing, ref) {
			res.Present = append(res.Present, ref)
			report.Infof("%s: present", ref)
			continue
		}
		id, err := c.Pull(ctx, ref)
		if err != nil {
			return res, err
		}
		res.Pulled = append(res.Pulled, ref)
		report.Infof("%s: pulled (%s)", ref, id)
	}
	return res, nil
}

// LogTail returns the last lines of the log of the newest container named
// container in pod (kube-system/<pod>) that has run, as `crictl logs
// --tail` prints them, and the container's state. The log file is read at the path the
// runtime reports, mapped by socketPath's mapping (see Dial).
func (c *Client) LogTail(ctx context.Context, pod, container string, lines int) (tail, state string, err error) {
	resp, err := c.runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{
		"io.kubernetes.pod.namespace":  "kube-system",
		"io.kubernetes.pod.name":       pod,
		"io.kubernetes.container.name": container,
	}}})
	if err != nil {
		return "", "", fmt.Errorf("list containers of pod %s in container runtime %q: %w", pod, c.endpoint, err)
	}
	var newest *runtimeapi.Container
	for _, ctr := range resp.GetContainers() {
		if newest == nil || newer(ctr, newest) {
			newest = ctr
		}
	}
	if newest == nil {
		return "", "", fmt.Errorf("container runtime %q has no container %s of pod %s", c.endpoint, container, pod)
	}
	status, err := c.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: newest.GetId()})
	if err != nil {
		return "", "", fmt.Errorf("ask container runtime %q for container %s: %w", c.endpoint, newest.GetId(), err)
	}
	st := status.GetStatus()
	state = strings.ToLower(strings.TrimPrefix(st.GetState().String(), "CONTAINER_"))
	if st.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
		state = fmt.Sprintf("%s with code %d (%s)", state, st.GetExitCode(), st.GetReason())
	}
	data, err := os.ReadFile(c.mapPath(st.GetLogPath()))
	if err != nil {
		return "", state, fmt.Errorf("read the log of container %s: %w", newest.GetId(), err)
	}
	return logMessages(data, lines), state, nil
}

// newer says whether a is the container to show rather than b: one that
// has run (its log says why it failed) beats one that is only created,
// as the kubelet's next attempt at a crashing container is for a moment;
// then the newer one.
func newer(a, b *runtimeapi.Container) bool {
	ran := func(c *runtimeapi.Container) bool {
		return c.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING || c.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED
	}
	if ran(a) != ran(b) {
		return ran(a)
	}
	return a.GetCreatedAt() > b.GetCreatedAt()
}

// logMessages keeps the messages of the last n lines of a CRI log file,
// whose lines are "<time> <stream> <P|F> <message>".
func logMessages(data []byte, n int) string {
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > n {
		all = all[len(all)-n:]
	}
	for i, line := range all {
		if fields := strings.SplitN(line, " ", 4); len(fields) == 4 {
			all[i] = fields[3]
		}
	}
	return strings.Join(all, "\n")
}

// ReadyPods lists which of the kube-system pods named pods have a sandbox
// the runtime reports ready: pods the kubelet still runs. The kubelet
// stops a pod's containers before its sandbox, so a pod without a ready
// sandbox runs nothing, not even a container it was starting when it
// was told to stop the pod.
func (c *Client) ReadyPods(ctx context.Context, pods []string) ([]string, error) {
	resp, err := c.runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
	}})
	if err != nil {
		return nil, fmt.Errorf("list pod sandboxes in container runtime %q: %w", c.endpoint, err)
	}
	var ready []string
	for _, sb := range resp.GetItems() {
		md := sb.GetMetadata()
		if sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY && md.GetNamespace() == "kube-system" &&
			slices.Contains(pods, md.GetName()) && !slices.Contains(ready, md.GetName()) {
			ready = append(ready, md.GetName())
		}
	}
	return ready, nil
}

// RunningPods lists every pod with a sandbox the runtime reports ready,
// as namespace/name: the pods still running on the node, in whatever
// namespace.
func (c *Client) RunningPods(ctx context.Context) ([]string, error) {
	resp, err := c.runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
	}})
	if err != nil {
		return nil, fmt.Errorf("list pod sandboxes in container runtime %q: %w", c.endpoint, err)
	}
	var running []string
	for _, sb := range resp.GetItems() {
		if sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
			running = append(running, sb.GetMetadata().GetNamespace()+"/"+sb.GetMetadata().GetName())
		}
	}
	slices.Sort(running)
	return running, nil
}

// RemovePods stops and removes every pod sandbox the runtime holds, with
// its containers, as `crictl rmp --all --force` does, and returns the
// pods removed, as namespace/name.
func (c *Client) RemovePods(ctx context.Context) ([]string, error) {
	resp, err := c.runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("list pod sandboxes in container runtime %q: %w", c.endpoint, err)
	}
	var removed []string
	for _, sb := range resp.GetItems() {
		name := sb.GetMetadata().GetNamespace() + "/" + sb.GetMetadata().GetName()
		if _, err := c.runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.GetId()}); err != nil {
			return removed, fmt.Errorf("stop pod %s in container runtime %q: %w", name, c.endpoint, err)
		}
		if _, err := c.runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.GetId()}); err != nil {
			return removed, fmt.Errorf("remove pod %s in container runtime %q: %w", name, c.endpoint, err)
		}
		removed = append(removed, name)
	}
	slices.Sort(removed)
	return removed, nil
}

// Version asks the runtime for its name and version, the CRI's first call:
// a runtime that answers it serves the CRI.
func (c *Client) Version(ctx context.Context) (string, error) {
	resp, err := c.runtime.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		return "", fmt.Errorf("ask container runtime %q for its version: %w", c.endpoint, err)
	}
	return resp.GetRuntimeName() + " " + resp.GetRuntimeVersion(), nil
}
