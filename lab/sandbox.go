package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"sort"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// sandbox is a pod sandbox. It runs no process: with the host network there
// is no namespace to hold open, so a sandbox is only a record that groups
// containers and remembers the pod's log directory.
type sandbox struct {
	ID        string                       `json:"id"`
	Config    *runtimeapi.PodSandboxConfig `json:"config"`
	State     runtimeapi.PodSandboxState   `json:"state"`
	CreatedAt int64                        `json:"createdAt"`
}

// newID returns a random 64-hex-digit ID, the shape crictl and the kubelet
// expect from container runtimes.
func newID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b)
}

// lookup finds an object by ID or by a unique ID prefix, so that the
// truncated IDs crictl prints work too.
func lookup[T any](m map[string]T, id string) (T, bool) {
	if v, ok := m[id]; ok || id == "" {
		return v, ok
	}
	var found T
	n := 0
	for k, v := range m {
		if strings.HasPrefix(k, id) {
			found = v
			n++
		}
	}
	return found, n == 1
}

// matchLabels reports whether labels has every key and value of selector.
func matchLabels(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// detectHostIP returns the source address of the host's default route, or
// failing that its first global unicast address: the address the kubelet
// would pick as the node IP too.
func detectHostIP() string {
	// A UDP "connection" sends nothing; it only asks the kernel for a route.
	if conn, err := net.Dial("udp", "192.0.2.1:9"); err == nil {
		defer func() { _ = conn.Close() }()
		if addr, ok := conn.LocalAddr().(*net.UDPAddr); ok && !addr.IP.IsLoopback() {
			return addr.IP.String()
		}
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipnet, ok := a.(*net.IPNet); ok && ipnet.IP.IsGlobalUnicast() {
			return ipnet.IP.String()
		}
	}
	return "127.0.0.1"
}

// RunPodSandbox records a host-network sandbox. Anything else is refused:
// the runtime has no network plugin and cannot give a pod its own network.
func (s runtimeService) RunPodSandbox(_ context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	cfg := req.GetConfig()
	if cfg.GetMetadata() == nil {
		return nil, invalid("run pod sandbox: metadata is required")
	}
	name := cfg.GetMetadata().GetNamespace() + "/" + cfg.GetMetadata().GetName()
	if h := req.GetRuntimeHandler(); h != "" {
		return nil, invalid("run pod sandbox %q: unknown runtime handler %q; the lab runtime only has the default handler", name, h)
	}
	if mode := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork(); mode != runtimeapi.NamespaceMode_NODE {
		return nil, invalid("run pod sandbox %q: network namespace mode %s: the lab runtime only runs hostNetwork pods", name, mode)
	}
	sb := &sandbox{
		ID:        newID(),
		Config:    cfg,
		State:     runtimeapi.PodSandboxState_SANDBOX_READY,
		CreatedAt: time.Now().UnixNano(),
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.saveSandbox(sb); err != nil {
		return nil, err
	}
	s.sandboxes[sb.ID] = sb
	s.logf("sandbox %.13s: created for pod %s (attempt %d)", sb.ID, name, cfg.GetMetadata().GetAttempt())
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: sb.ID}, nil
}

// StopPodSandbox kills the sandbox's running containers, as the CRI
// requires (the kubelet has already stopped them gracefully), and marks
// the sandbox not ready.
func (s runtimeService) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	s.mu.Lock()
	sb, ok := lookup(s.sandboxes, req.GetPodSandboxId())
	s.mu.Unlock()
	if !ok {
		return nil, notFound("pod sandbox", req.GetPodSandboxId())
	}
	for _, c := range s.sandboxContainers(sb.ID) {
		if err := s.stopContainer(ctx, c, 0); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		sb.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		if err := s.saveSandbox(sb); err != nil {
			return nil, err
		}
		s.logf("sandbox %.13s: stopped", sb.ID)
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

// RemovePodSandbox kills and removes the sandbox's containers and forgets
// the sandbox. Removing an unknown sandbox succeeds: removal is idempotent.
func (s runtimeService) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	s.mu.Lock()
	sb, ok := lookup(s.sandboxes, req.GetPodSandboxId())
	s.mu.Unlock()
	if !ok {
		return &runtimeapi.RemovePodSandboxResponse{}, nil
	}
	for _, c := range s.sandboxContainers(sb.ID) {
		if err := s.removeContainer(ctx, c); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.deleteSandbox(sb); err != nil {
		return nil, err
	}
	delete(s.sandboxes, sb.ID)
	s.logf("sandbox %.13s: removed", sb.ID)
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

// PodSandboxStatus reports the sandbox with the host's namespaces, which is
// where its processes run: mode NODE (the kubelet starts a new sandbox if
// the network mode does not match the pod) and the host IP.
func (s runtimeService) PodSandboxStatus(_ context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := lookup(s.sandboxes, req.GetPodSandboxId())
	if !ok {
		return nil, notFound("pod sandbox", req.GetPodSandboxId())
	}
	cfg := sb.Config
	node := runtimeapi.NamespaceMode_NODE
	return &runtimeapi.PodSandboxStatusResponse{Status: &runtimeapi.PodSandboxStatus{
		Id:        sb.ID,
		Metadata:  cfg.GetMetadata(),
		State:     sb.State,
		CreatedAt: sb.CreatedAt,
		Network:   &runtimeapi.PodSandboxNetworkStatus{Ip: s.hostIP},
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{
			Options: &runtimeapi.NamespaceOption{Network: node, Pid: node, Ipc: node},
		}},
		Labels:      cfg.GetLabels(),
		Annotations: cfg.GetAnnotations(),
	}}, nil
}

// ListPodSandbox lists sandboxes matching the filter's ID (or ID prefix),
// state and labels, oldest first. The kubelet finds a pod's sandboxes by
// the pod UID label.
func (s runtimeService) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f := req.GetFilter()
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &runtimeapi.ListPodSandboxResponse{}
	for _, sb := range s.sandboxes {
		if !strings.HasPrefix(sb.ID, f.GetId()) ||
			(f.GetState() != nil && f.GetState().GetState() != sb.State) ||
			!matchLabels(sb.Config.GetLabels(), f.GetLabelSelector()) {
			continue
		}
		resp.Items = append(resp.Items, &runtimeapi.PodSandbox{
			Id:          sb.ID,
			Metadata:    sb.Config.GetMetadata(),
			State:       sb.State,
			CreatedAt:   sb.CreatedAt,
			Labels:      sb.Config.GetLabels(),
			Annotations: sb.Config.GetAnnotations(),
		})
	}
	sort.Slice(resp.Items, func(i, j int) bool { return resp.Items[i].CreatedAt < resp.Items[j].CreatedAt })
	return resp, nil
}

// UpdatePodSandboxResources accepts and ignores new pod resources: the
// runtime enforces no limits.
func (s runtimeService) UpdatePodSandboxResources(context.Context, *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	return &runtimeapi.UpdatePodSandboxResourcesResponse{}, nil
}

// sandboxContainers returns the containers of a sandbox.
func (r *Runtime) sandboxContainers(sandboxID string) []*container {
	r.mu.Lock()
	defer r.mu.Unlock()
	var cs []*container
	for _, c := range r.containers {
		if c.SandboxID == sandboxID {
			cs = append(cs, c)
		}
	}
	return cs
}
