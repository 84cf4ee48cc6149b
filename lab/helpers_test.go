package lab_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kubeboot/kubeboot/lab"
)

// Environment variables that turn the test binary into a bare runtime
// process, so that the restart test can kill a runtime for real.
const (
	serveSocketEnv = "LAB_TEST_SERVE_SOCKET"
	serveBinEnv    = "LAB_TEST_SERVE_BIN"
	serveStateEnv  = "LAB_TEST_SERVE_STATE"
)

func TestMain(m *testing.M) {
	if sock := os.Getenv(serveSocketEnv); sock != "" {
		rt, err := lab.NewRuntime(lab.Options{BinDir: os.Getenv(serveBinEnv), StateDir: os.Getenv(serveStateEnv), Logger: os.Stderr})
		if err == nil {
			err = rt.Serve(context.Background(), sock)
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// env is a runtime serving on a socket in a temp dir, and a client for it.
type env struct {
	t        *testing.T
	dir      string // holds bin/, state/, logs/ and the socket
	binDir   string
	stateDir string
	logDir   string
	sock     string
	rt       *lab.Runtime
	rs       runtimeapi.RuntimeServiceClient
	is       runtimeapi.ImageServiceClient
}

// newEnv starts a runtime whose bin dir has sh and sleep.
func newEnv(t *testing.T) *env {
	e := newDirs(t)
	e.start()
	return e
}

// newDirs prepares the directories of an env without starting a runtime.
func newDirs(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{
		t:        t,
		dir:      dir,
		binDir:   filepath.Join(dir, "bin"),
		stateDir: filepath.Join(dir, "state"),
		logDir:   filepath.Join(dir, "logs"),
		sock:     filepath.Join(dir, "cri.sock"),
	}
	if err := os.Mkdir(e.binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sh", "sleep"} {
		path, err := exec.LookPath(name)
		if err != nil {
			t.Fatalf("find %s for the test bin dir: %v", name, err)
		}
		if err := os.Symlink(path, filepath.Join(e.binDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	e.connect()
	return e
}

// connect creates the gRPC client; it connects lazily, so a runtime may
// start later.
func (e *env) connect() {
	// Short reconnect backoff: tests start runtimes after their clients.
	backoffCfg := backoff.DefaultConfig
	backoffCfg.MaxDelay = 50 * time.Millisecond
	conn, err := grpc.NewClient("unix://"+e.sock,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoffCfg, MinConnectTimeout: time.Second}))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = conn.Close() })
	e.rs = runtimeapi.NewRuntimeServiceClient(conn)
	e.is = runtimeapi.NewImageServiceClient(conn)
}

// start creates a runtime on the env's dirs and serves it until the test
// ends; then every container it knows is stopped.
func (e *env) start() {
	t := e.t
	t.Helper()
	rt, err := lab.NewRuntime(lab.Options{BinDir: e.binDir, StateDir: e.stateDir, Logger: newTestWriter(t)})
	if err != nil {
		t.Fatal(err)
	}
	e.rt = rt
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- rt.Serve(ctx, e.sock) }()
	t.Cleanup(func() {
		stopCtx, stop := context.WithTimeout(context.Background(), 2*time.Second)
		defer stop()
		if err := rt.StopAll(stopCtx); err != nil {
			t.Errorf("StopAll: %v", err)
		}
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	eventually(t, 5*time.Second, "the runtime answers Version", func() bool {
		_, err := e.rs.Version(ctx, &runtimeapi.VersionRequest{})
		return err == nil
	})
}

// testWriter sends the runtime's log to t.Log until the test ends; the
// runtime's goroutines may log after that.
type testWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func newTestWriter(t *testing.T) *testWriter {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func sandboxConfig(name, logDir string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Uid: "uid-" + name, Namespace: "kube-system"},
		LogDirectory: filepath.Join(logDir, "kube-system_"+name),
		Labels:       map[string]string{"io.kubernetes.pod.uid": "uid-" + name, "app": name},
		Annotations:  map[string]string{"kubernetes.io/config.source": "file"},
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
		}},
	}
}

func (e *env) runSandbox(name string) (string, *runtimeapi.PodSandboxConfig) {
	e.t.Helper()
	cfg := sandboxConfig(name, e.logDir)
	resp, err := e.rs.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		e.t.Fatalf("RunPodSandbox: %v", err)
	}
	return resp.PodSandboxId, cfg
}

// shConfig is a container running a shell script.
func shConfig(name, script string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: "registry.k8s.io/sh:1"},
		Command:  []string{"sh", "-c", script},
		LogPath:  name + "/0.log",
		Labels:   map[string]string{"io.kubernetes.container.name": name},
	}
}

func (e *env) create(sandboxID string, cfg *runtimeapi.ContainerConfig) string {
	e.t.Helper()
	resp, err := e.rs.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: sandboxID, Config: cfg})
	if err != nil {
		e.t.Fatalf("CreateContainer %s: %v", cfg.GetMetadata().GetName(), err)
	}
	return resp.ContainerId
}

// run creates and starts a container.
func (e *env) run(sandboxID string, cfg *runtimeapi.ContainerConfig) string {
	e.t.Helper()
	id := e.create(sandboxID, cfg)
	if _, err := e.rs.StartContainer(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		e.t.Fatalf("StartContainer %s: %v", cfg.GetMetadata().GetName(), err)
	}
	return id
}

func (e *env) status(id string) *runtimeapi.ContainerStatus {
	e.t.Helper()
	resp, err := e.rs.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		e.t.Fatalf("ContainerStatus: %v", err)
	}
	return resp.Status
}

// pid reads a container's pid from its verbose status.
// waitIgnoresTERM waits until the process pid ignores SIGTERM, as a shell
// does once it has run `trap ” TERM`: a test that stops it sooner would
// see it die of the TERM it means to be ignored.
func (e *env) waitIgnoresTERM(pid int) {
	e.t.Helper()
	const sigterm = 15
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			e.t.Fatalf("read the status of pid %d: %v", pid, err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if mask, ok := strings.CutPrefix(line, "SigIgn:\t"); ok {
				if ignored, err := strconv.ParseUint(mask, 16, 64); err == nil && ignored&(1<<(sigterm-1)) != 0 {
					return
				}
			}
		}
	}
	e.t.Fatalf("pid %d does not ignore SIGTERM after 10s", pid)
}

func (e *env) pid(id string) int {
	e.t.Helper()
	resp, err := e.rs.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		e.t.Fatalf("ContainerStatus: %v", err)
	}
	var info struct{ PID int }
	if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil || info.PID == 0 {
		e.t.Fatalf("no pid in verbose status info %q: %v", resp.Info["info"], err)
	}
	return info.PID
}

// waitExited waits until a container has exited and returns its status.
func (e *env) waitExited(id string) *runtimeapi.ContainerStatus {
	e.t.Helper()
	var st *runtimeapi.ContainerStatus
	eventually(e.t, 5*time.Second, "container "+id+" exits", func() bool {
		st = e.status(id)
		return st.State == runtimeapi.ContainerState_CONTAINER_EXITED
	})
	return st
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wantCode fails unless err is a gRPC error with the code and a message
// containing every one of parts.
func wantCode(t *testing.T, err error, code codes.Code, parts ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got error %v (code %s), want code %s", err, status.Code(err), code)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}

// processRunning reports whether pid is a live (non-zombie) process.
func processRunning(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// groupGone reports whether no process is left in process group pgid,
// zombies aside.
func groupGone(pgid int) bool {
	err := syscall.Kill(-pgid, 0)
	if errors.Is(err, syscall.ESRCH) {
		return true
	}
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && g == pgid && processRunning(pid) {
			return false
		}
	}
	return true
}

// readLog reads a container's CRI log file.
func readLog(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(data)
}
