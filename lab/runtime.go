// Package lab owns kubeboot's lab container runtime: a CRI v1 runtime and
// image service that runs containers as plain local processes, so that the
// real kubelet can run kubeboot's static pods on machines that have no
// container runtime.
//
// The mapping from CRI concepts to the host:
//   - An image is a binary in the bin dir, named by the last path element of
//     the image's repository: registry.k8s.io/etcd:3.6.8-0 is BinDir/etcd.
//     The pause image is the sandbox image and needs no binary.
//   - A pod sandbox runs no process and only supports the host network.
//   - A container is a process in its own process group, running the
//     container's command and args with the literal environment. Its stdout
//     and stderr go to the CRI log file the kubelet asks for.
//   - Nothing is isolated: there are no namespaces, cgroups, bind mounts,
//     users from an image, capabilities or resource limits. Mounts must
//     already be host paths at the same place in the "container".
//
// Runtime state lives as JSON files under the state dir. Containers outlive
// the runtime: a restarted runtime reattaches to the processes that are
// still running (see state.go for what it can and cannot know about them).
package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RuntimeName is the runtime name the CRI Version call reports.
const RuntimeName = "kubeboot-lab"

const (
	// criVersion is the kubelet runtime API version; the kubelet refuses
	// any other.
	criVersion = "0.1.0"
	// runtimeVersion is the lab runtime's own version; it changes when the
	// behaviour the kubelet sees changes.
	runtimeVersion = "0.1.0"
)

// stopAllGrace is how long StopAll lets containers shut down on their stop
// signal before it kills them.
const stopAllGrace = 10 * time.Second

// Options configures a Runtime.
type Options struct {
	// BinDir holds the binaries that stand in for images. It may be empty
	// for a runtime that only stops containers.
	BinDir string
	// StateDir holds the runtime's state: one JSON file per sandbox and per
	// container, and the containers' output FIFOs. Keep it across runtime
	// restarts, and never share it between two running runtimes.
	StateDir string
	// HostIP is the IP reported for every sandbox. Empty means the address
	// the host uses for its default route.
	HostIP string
	// Logger receives one line per container event and per failed request.
	// Nil discards them.
	Logger io.Writer
}

// Runtime is a process-backed CRI runtime. Create it with NewRuntime and
// expose it to the kubelet with Serve.
type Runtime struct {
	binDir   string
	stateDir string
	hostIP   string
	logger   *log.Logger
	images   *imageStore

	// mu guards the maps and every field of the records in them.
	mu         sync.Mutex
	sandboxes  map[string]*sandbox
	containers map[string]*container
}

// NewRuntime returns a runtime using the binaries in opts.BinDir and the
// state in opts.StateDir. It loads the state a previous runtime left behind
// and reattaches to the containers that are still running.
func NewRuntime(opts Options) (*Runtime, error) {
	if opts.StateDir == "" {
		return nil, errors.New("create lab runtime: StateDir is required")
	}
	binDir, err := checkBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	stateDir, err := filepath.Abs(opts.StateDir)
	if err != nil {
		return nil, fmt.Errorf("resolve state dir %q: %w", opts.StateDir, err)
	}
	logOut := opts.Logger
	if logOut == nil {
		logOut = io.Discard
	}
	hostIP := opts.HostIP
	if hostIP == "" {
		hostIP = detectHostIP()
	}
	r := &Runtime{
		binDir:     binDir,
		stateDir:   stateDir,
		hostIP:     hostIP,
		logger:     log.New(logOut, "lab: ", log.LstdFlags|log.Lmicroseconds),
		images:     newImageStore(binDir),
		sandboxes:  map[string]*sandbox{},
		containers: map[string]*container{},
	}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

// Serve answers CRI requests on the unix socket at socketPath until ctx is
// done; then it returns nil. A stale socket left by a dead runtime is
// replaced. Containers keep running when Serve returns: a runtime restart
// must not restart the control plane. Use StopAll to stop them.
func (r *Runtime) Serve(ctx context.Context, socketPath string) error {
	if r.binDir == "" {
		return errors.New("serve CRI: the runtime has no BinDir")
	}
	if err := removeStaleSocket(socketPath); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(socketPath), 0o755); err != nil {
		return fmt.Errorf("create socket dir for %q: %w", socketPath, err)
	}
	lis, err := net.Listen("unix", socketPath)
	if err != nil {
		return fmt.Errorf("listen on %q: %w", socketPath, err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(r.logFailures))
	runtimeapi.RegisterRuntimeServiceServer(srv, runtimeService{Runtime: r})
	runtimeapi.RegisterImageServiceServer(srv, imageService{Runtime: r})

	served := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			srv.Stop()
		case <-served:
		}
	}()
	r.logf("serving CRI on %s (bin dir %s, state dir %s)", socketPath, r.binDir, r.stateDir)
	err = srv.Serve(lis)
	close(served)
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("serve CRI on %q: %w", socketPath, err)
}

// StopAll stops every running container: each gets its stop signal, and
// whatever still runs after a grace period (or when ctx is done) is killed.
// Every sandbox is then marked not ready. This is `kubeboot lab down`; stop
// the kubelet first, or it starts the pods again.
func (r *Runtime) StopAll(ctx context.Context) error {
	r.mu.Lock()
	var running []*container
	for _, c := range r.containers {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			running = append(running, c)
		}
	}
	r.mu.Unlock()

	errs := make([]error, len(running))
	var wg sync.WaitGroup
	for i, c := range running {
		wg.Go(func() { errs[i] = r.stopContainer(ctx, c, stopAllGrace) })
	}
	wg.Wait()

	r.mu.Lock()
	for _, sb := range r.sandboxes {
		if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			sb.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
			errs = append(errs, r.saveSandbox(sb))
		}
	}
	r.mu.Unlock()
	return errors.Join(errs...)
}

// checkBinDir resolves a bin dir. Empty is allowed: such a runtime can only
// stop containers (StopAll), which needs no binaries.
func checkBinDir(dir string) (string, error) {
	if dir == "" {
		return "", nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("resolve bin dir %q: %w", dir, err)
	}
	if fi, err := os.Stat(abs); err != nil {
		return "", fmt.Errorf("open bin dir %q: %w", abs, err)
	} else if !fi.IsDir() {
		return "", fmt.Errorf("open bin dir %q: not a directory", abs)
	}
	return abs, nil
}

// removeStaleSocket removes a socket that no runtime answers on any more,
// and refuses to touch anything else.
func removeStaleSocket(socketPath string) error {
	fi, err := os.Lstat(socketPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check socket %q: %w", socketPath, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("remove stale socket %q: not a socket", socketPath)
	}
	if conn, err := net.DialTimeout("unix", socketPath, time.Second); err == nil {
		_ = conn.Close()
		return fmt.Errorf("listen on %q: another runtime is serving on it", socketPath)
	}
	if err := os.Remove(socketPath); err != nil {
		return fmt.Errorf("remove stale socket %q: %w", socketPath, err)
	}
	return nil
}

// logFailures logs every failed request, so that what the kubelet asked for
// and did not get shows up in the runtime's log.
func (r *Runtime) logFailures(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err != nil {
		r.logf("%s failed: %v", path.Base(info.FullMethod), err)
	}
	return resp, err
}

func (r *Runtime) logf(format string, args ...any) {
	r.logger.Printf(format, args...)
}

// notFound is the error for an unknown ID. The kubelet tells NotFound apart
// from other failures: it means "already gone", which is not an error when a
// container is removed between a list and a status call.
func notFound(kind, id string) error {
	return status.Errorf(codes.NotFound, "%s %q not found", kind, id)
}

// invalid is the error for a request the lab runtime cannot honour.
func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// wrongState is the error for a request that does not fit an object's state.
func wrongState(format string, args ...any) error {
	return status.Errorf(codes.FailedPrecondition, format, args...)
}

// runtimeService implements the CRI RuntimeService. Every RPC the kubelet
// v1.36 calls with its default feature gates is implemented. The embedded
// Unimplemented server answers the rest, and the kubelet copes with that:
//   - the Stream* list calls (alpha CRIListStreaming): it falls back to the
//     unary lists;
//   - GetContainerEvents (alpha EventedPLEG): it falls back to relisting;
//   - ListMetricDescriptors and ListPodSandboxMetrics: only used with the
//     alpha PodAndContainerStatsFromCRI gate;
//   - CheckpointContainer: only on an explicit checkpoint request.
type runtimeService struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	*Runtime
}

// Version reports the runtime's name and CRI API version; the kubelet calls
// it first to validate the connection.
func (s runtimeService) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{
		Version:           criVersion,
		RuntimeName:       RuntimeName,
		RuntimeVersion:    runtimeVersion,
		RuntimeApiVersion: "v1",
	}, nil
}

// Status reports the runtime and the (host) network as ready.
func (s runtimeService) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{
		Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
			{Type: runtimeapi.RuntimeReady, Status: true},
			{Type: runtimeapi.NetworkReady, Status: true},
		}},
		RuntimeHandlers: []*runtimeapi.RuntimeHandler{{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{}}},
		Features:        &runtimeapi.RuntimeFeatures{},
	}, nil
}

// RuntimeConfig reports the cgroupfs driver: the kubelet adopts the
// runtime's driver, and cgroupfs needs no systemd. The runtime creates no
// cgroups either way.
func (s runtimeService) RuntimeConfig(context.Context, *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{
		CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS,
	}}, nil
}

// UpdateRuntimeConfig accepts the pod CIDR and ignores it: sandboxes only
// use the host network.
func (s runtimeService) UpdateRuntimeConfig(context.Context, *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}

// Exec is only used by kubectl exec, which the lab runtime does not offer.
func (s runtimeService) Exec(context.Context, *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	return nil, status.Error(codes.Unimplemented, "exec: the lab runtime has no streaming server; run the command on the host")
}

// Attach is only used by kubectl attach, which the lab runtime does not offer.
func (s runtimeService) Attach(context.Context, *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	return nil, status.Error(codes.Unimplemented, "attach: the lab runtime has no streaming server; read the container log instead")
}

// PortForward is only used by kubectl port-forward; sandboxes use the host
// network, so their ports are reachable on the host already.
func (s runtimeService) PortForward(context.Context, *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return nil, status.Error(codes.Unimplemented, "port-forward: sandboxes use the host network; connect to the host port directly")
}
