package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// terminationMessagePathAnnotation is where the kubelet records a
// container's terminationMessagePath; it mounts a host file there.
const terminationMessagePathAnnotation = "io.kubernetes.container.terminationMessagePath"

// container is a container record: what the kubelet asked for, how it was
// resolved, and what happened to its process. The exported fields are saved
// to the state dir.
type container struct {
	ID        string                      `json:"id"`
	SandboxID string                      `json:"sandboxId"`
	Config    *runtimeapi.ContainerConfig `json:"config"`
	ImageID   string                      `json:"imageId"`
	// Path is the resolved executable; Argv keeps the name it was asked by.
	Path    string   `json:"path"`
	Argv    []string `json:"argv"`
	LogPath string   `json:"logPath,omitempty"` // absolute; empty discards the output

	State      runtimeapi.ContainerState `json:"state"`
	CreatedAt  int64                     `json:"createdAt"`
	StartedAt  int64                     `json:"startedAt,omitempty"`
	FinishedAt int64                     `json:"finishedAt,omitempty"`
	ExitCode   int32                     `json:"exitCode"`
	Reason     string                    `json:"reason,omitempty"`
	Message    string                    `json:"message,omitempty"`
	PID        int                       `json:"pid,omitempty"`
	// StartTicks is the process's start time from /proc/<pid>/stat. A pid
	// alone is not an identity: after a restart, the same pid with another
	// start time is somebody else's process.
	StartTicks uint64 `json:"startTicks,omitempty"`

	proc *process // the live process; nil until started
}

// CreateContainer resolves the container's image and command and checks its
// mounts, so that every problem shows up here as a clear error rather than
// as a process that fails to start.
func (s runtimeService) CreateContainer(_ context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	cfg := req.GetConfig()
	if cfg.GetMetadata() == nil {
		return nil, invalid("create container: metadata is required")
	}
	name := cfg.GetMetadata().GetName()
	s.mu.Lock()
	sb, ok := lookup(s.sandboxes, req.GetPodSandboxId())
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("create container %q: %w", name, notFound("pod sandbox", req.GetPodSandboxId()))
	}
	c, err := s.newContainer(sb, cfg)
	if err != nil {
		return nil, fmt.Errorf("create container %q: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.saveContainer(c); err != nil {
		return nil, err
	}
	s.containers[c.ID] = c
	s.logf("container %.13s: created %q in sandbox %.13s: %s", c.ID, name, sb.ID, strings.Join(c.Argv, " "))
	return &runtimeapi.CreateContainerResponse{ContainerId: c.ID}, nil
}

func (r *Runtime) newContainer(sb *sandbox, cfg *runtimeapi.ContainerConfig) (*container, error) {
	if len(cfg.GetDevices()) > 0 || len(cfg.GetCDIDevices()) > 0 {
		return nil, invalid("devices are not supported by the lab runtime")
	}
	if u := cfg.GetLinux().GetSecurityContext().GetRunAsUsername(); u != "" {
		return nil, invalid("runAsUsername %q: there is no image /etc/passwd to look it up in; use runAsUser", u)
	}
	if err := checkMounts(cfg); err != nil {
		return nil, err
	}
	img, err := r.images.resolve(cfg.GetImage())
	if err != nil {
		return nil, err
	}
	if img.path == "" {
		return nil, invalid("image %q is the sandbox image and has no binary to run", cfg.GetImage().GetImage())
	}
	// Like an image entrypoint: no command runs the image's binary with the args.
	argv := append([]string{img.name}, cfg.GetArgs()...)
	path := img.path
	if len(cfg.GetCommand()) > 0 {
		argv = append(append([]string(nil), cfg.GetCommand()...), cfg.GetArgs()...)
		// A command naming the image's own binary, as kubeadm-style
		// manifests do, runs the image's binary: a v1.35 image runs
		// <bin dir>/v1.35/<name> when that exists (see tagDir).
		if argv[0] != img.name {
			if path, err = r.resolveCommand(argv[0]); err != nil {
				return nil, err
			}
		}
	}
	var logPath string
	if dir := sb.Config.GetLogDirectory(); dir != "" && cfg.GetLogPath() != "" {
		logPath = filepath.Join(dir, cfg.GetLogPath())
	}
	return &container{
		ID:        newID(),
		SandboxID: sb.ID,
		Config:    cfg,
		ImageID:   img.id,
		Path:      path,
		Argv:      argv,
		LogPath:   logPath,
		State:     runtimeapi.ContainerState_CONTAINER_CREATED,
		CreatedAt: time.Now().UnixNano(),
	}, nil
}

// resolveCommand finds a command: a bare name in the bin dir first, so the
// pinned binaries win over whatever the host has, then in the host's PATH.
func (r *Runtime) resolveCommand(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := filepath.Join(r.binDir, name)
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		return path, nil
	}
	if path, err := exec.LookPath(name); err == nil {
		return path, nil
	}
	return "", invalid("command %q: not found in bin dir %q or in PATH", name, r.binDir)
}

// checkMounts accepts host paths that exist and sit where the process will
// look for them, since there is no mount namespace to put them anywhere
// else. The kubelet's own /etc/hosts and termination log mounts are
// accepted as they are: nothing in a control plane pod reads them.
func checkMounts(cfg *runtimeapi.ContainerConfig) error {
	terminationLog := cfg.GetAnnotations()[terminationMessagePathAnnotation]
	for _, m := range cfg.GetMounts() {
		cp := m.GetContainerPath()
		if cp == "/etc/hosts" || cp == "/dev/termination-log" || cp == terminationLog {
			continue
		}
		if m.GetImage().GetImage() != "" {
			return invalid("mount %q: image volumes are not supported by the lab runtime; use a hostPath", cp)
		}
		if m.GetHostPath() == "" {
			return invalid("mount %q: no host path; the lab runtime only supports hostPath mounts", cp)
		}
		if _, err := os.Stat(m.GetHostPath()); err != nil {
			return invalid("mount %q: host path %q: %v", cp, m.GetHostPath(), err)
		}
		if filepath.Clean(cp) != filepath.Clean(m.GetHostPath()) {
			return invalid("mount %q: host path %q differs; processes see host paths, so mountPath must equal the hostPath", cp, m.GetHostPath())
		}
	}
	return nil
}

// StartContainer starts the container's process.
func (s runtimeService) StartContainer(_ context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := lookup(s.containers, req.GetContainerId())
	if !ok {
		return nil, notFound("container", req.GetContainerId())
	}
	if c.State != runtimeapi.ContainerState_CONTAINER_CREATED {
		return nil, wrongState("start container %q: it is %s, not created", c.ID, c.State)
	}
	if sb := s.sandboxes[c.SandboxID]; sb == nil || sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		return nil, wrongState("start container %q: its pod sandbox %q is not ready", c.ID, c.SandboxID)
	}
	if err := s.startProcess(c); err != nil {
		// Like containerd: a container that cannot start is exited, with
		// exit code 128 and the reason in the message.
		now := time.Now().UnixNano()
		c.State, c.StartedAt, c.FinishedAt = runtimeapi.ContainerState_CONTAINER_EXITED, now, now
		c.ExitCode, c.Reason, c.Message = 128, "StartError", err.Error()
		if serr := s.saveContainer(c); serr != nil {
			s.logf("container %.13s: %v", c.ID, serr)
		}
		return nil, fmt.Errorf("start container %q: %w", c.ID, err)
	}
	s.logf("container %.13s: started pid %d", c.ID, c.PID)
	return &runtimeapi.StartContainerResponse{}, nil
}

// StopContainer sends the container's stop signal and kills its process
// group after the timeout. Stopping a container that is not running
// succeeds.
func (s runtimeService) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	s.mu.Lock()
	c, ok := lookup(s.containers, req.GetContainerId())
	s.mu.Unlock()
	if !ok {
		return nil, notFound("container", req.GetContainerId())
	}
	if err := s.stopContainer(ctx, c, time.Duration(req.GetTimeout())*time.Second); err != nil {
		return nil, err
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

// RemoveContainer kills the container if it still runs and forgets it. The
// log file stays: the kubelet removes it. Removing an unknown container
// succeeds: removal is idempotent.
func (s runtimeService) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	s.mu.Lock()
	c, ok := lookup(s.containers, req.GetContainerId())
	s.mu.Unlock()
	if !ok {
		return &runtimeapi.RemoveContainerResponse{}, nil
	}
	if err := s.removeContainer(ctx, c); err != nil {
		return nil, err
	}
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func (r *Runtime) removeContainer(ctx context.Context, c *container) error {
	if err := r.stopContainer(ctx, c, 0); err != nil {
		return fmt.Errorf("remove container %q: %w", c.ID, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.proc != nil {
		c.proc.closeOutput()
	}
	if err := r.deleteContainer(c); err != nil {
		return err
	}
	delete(r.containers, c.ID)
	r.logf("container %.13s: removed", c.ID)
	return nil
}

// ContainerStatus reports the container. The kubelet reads its own
// bookkeeping back from the labels and annotations, the termination message
// from the mounts and the logs from the log path.
func (s runtimeService) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := lookup(s.containers, req.GetContainerId())
	if !ok {
		return nil, notFound("container", req.GetContainerId())
	}
	cfg := c.Config
	resp := &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{
		Id:          c.ID,
		Metadata:    cfg.GetMetadata(),
		State:       c.State,
		CreatedAt:   c.CreatedAt,
		StartedAt:   c.StartedAt,
		FinishedAt:  c.FinishedAt,
		ExitCode:    c.ExitCode,
		Image:       c.imageSpec(),
		ImageRef:    c.ImageID,
		ImageId:     c.ImageID,
		Reason:      c.Reason,
		Message:     c.Message,
		Labels:      cfg.GetLabels(),
		Annotations: cfg.GetAnnotations(),
		Mounts:      cfg.GetMounts(),
		LogPath:     c.LogPath,
		Resources:   &runtimeapi.ContainerResources{Linux: cfg.GetLinux().GetResources()},
		StopSignal:  cfg.GetStopSignal(),
	}}
	if req.GetVerbose() {
		info, err := json.Marshal(map[string]any{"pid": c.PID, "path": c.Path, "argv": c.Argv, "workingDir": workingDir(cfg)})
		if err != nil {
			return nil, fmt.Errorf("describe container %q: %w", c.ID, err)
		}
		resp.Info = map[string]string{"info": string(info)}
	}
	return resp, nil
}

// imageSpec is the image the pod asked for, which is what the kubelet shows
// in the pod status, rather than the image ID it created the container with.
func (c *container) imageSpec() *runtimeapi.ImageSpec {
	spec := c.Config.GetImage()
	name := spec.GetUserSpecifiedImage()
	if name == "" {
		name = spec.GetImage()
	}
	return &runtimeapi.ImageSpec{Image: name, UserSpecifiedImage: spec.GetUserSpecifiedImage(), Annotations: spec.GetAnnotations()}
}

// ListContainers lists containers matching the filter's ID (or ID prefix),
// state, sandbox and labels, oldest first. The kubelet lists a pod's
// containers by the pod UID label.
func (s runtimeService) ListContainers(_ context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	f := req.GetFilter()
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &runtimeapi.ListContainersResponse{}
	for _, c := range s.containers {
		if !strings.HasPrefix(c.ID, f.GetId()) ||
			!strings.HasPrefix(c.SandboxID, f.GetPodSandboxId()) ||
			(f.GetState() != nil && f.GetState().GetState() != c.State) ||
			!matchLabels(c.Config.GetLabels(), f.GetLabelSelector()) {
			continue
		}
		resp.Containers = append(resp.Containers, &runtimeapi.Container{
			Id:           c.ID,
			PodSandboxId: c.SandboxID,
			Metadata:     c.Config.GetMetadata(),
			Image:        c.imageSpec(),
			ImageRef:     c.ImageID,
			ImageId:      c.ImageID,
			State:        c.State,
			CreatedAt:    c.CreatedAt,
			Labels:       c.Config.GetLabels(),
			Annotations:  c.Config.GetAnnotations(),
		})
	}
	sort.Slice(resp.Containers, func(i, j int) bool { return resp.Containers[i].CreatedAt < resp.Containers[j].CreatedAt })
	return resp, nil
}

// UpdateContainerResources records the new resources, so that the status
// reports what the kubelet asked for, and enforces nothing: there are no
// cgroups.
func (s runtimeService) UpdateContainerResources(_ context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := lookup(s.containers, req.GetContainerId())
	if !ok {
		return nil, notFound("container", req.GetContainerId())
	}
	if req.GetLinux() != nil {
		if c.Config.Linux == nil {
			c.Config.Linux = &runtimeapi.LinuxContainerConfig{}
		}
		c.Config.Linux.Resources = req.GetLinux()
		if err := s.saveContainer(c); err != nil {
			return nil, err
		}
	}
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

// ReopenContainerLog reopens the log file at its path. The kubelet rotates
// logs by renaming the file and then asking for this.
func (s runtimeService) ReopenContainerLog(_ context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := lookup(s.containers, req.GetContainerId())
	if !ok {
		return nil, notFound("container", req.GetContainerId())
	}
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING || c.proc == nil {
		return nil, wrongState("reopen log of container %q: it is %s, not running", c.ID, c.State)
	}
	if err := c.proc.logs.reopen(); err != nil {
		return nil, err
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}

// stopSignal is the signal the container asked to be stopped with, SIGTERM
// by default.
func stopSignal(cfg *runtimeapi.ContainerConfig) unix.Signal {
	if sig := cfg.GetStopSignal(); sig != runtimeapi.Signal_RUNTIME_DEFAULT {
		if n := unix.SignalNum(sig.String()); n != 0 {
			return n
		}
	}
	return unix.SIGTERM
}

// workingDir is the container's working directory, the root by default as
// in an image without WORKDIR.
func workingDir(cfg *runtimeapi.ContainerConfig) string {
	if dir := cfg.GetWorkingDir(); dir != "" {
		return dir
	}
	return "/"
}
