package lab_test

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kubeboot/kubeboot/lab"
)

func TestVersionStatusAndConfig(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()

	v, err := e.rs.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet rejects a runtime that leaves any of these empty.
	if v.RuntimeName != lab.RuntimeName || v.RuntimeApiVersion != "v1" || v.Version == "" || v.RuntimeVersion == "" {
		t.Errorf("Version = %+v", v)
	}

	st, err := e.rs.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ready := map[string]bool{}
	for _, c := range st.GetStatus().GetConditions() {
		ready[c.Type] = c.Status
	}
	if !ready[runtimeapi.RuntimeReady] || !ready[runtimeapi.NetworkReady] {
		t.Errorf("Status conditions = %v, want RuntimeReady and NetworkReady true", st.GetStatus().GetConditions())
	}

	cfg, err := e.rs.RuntimeConfig(ctx, &runtimeapi.RuntimeConfigRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.GetLinux().GetCgroupDriver(); got != runtimeapi.CgroupDriver_CGROUPFS {
		t.Errorf("cgroup driver = %s, want CGROUPFS", got)
	}
	if _, err := e.rs.UpdateRuntimeConfig(ctx, &runtimeapi.UpdateRuntimeConfigRequest{
		RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.244.0.0/24"}},
	}); err != nil {
		t.Errorf("UpdateRuntimeConfig: %v", err)
	}
}

func TestUnimplementedCalls(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	_, err := e.rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "x", Cmd: []string{"true"}})
	wantCode(t, err, codes.Unimplemented, "exec")
	_, err = e.rs.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: "x"})
	wantCode(t, err, codes.Unimplemented, "host network")

	// The kubelet's evented PLEG falls back to relisting on Unimplemented.
	stream, err := e.rs.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	wantCode(t, err, codes.Unimplemented)
}

func TestServeReplacesStaleSocketAndRefusesLiveOne(t *testing.T) {
	e := newDirs(t)
	// A socket file left behind by a runtime that died.
	lis, err := net.Listen("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = lis.Close()

	e.start()

	second, err := lab.NewRuntime(lab.Options{BinDir: e.binDir, StateDir: filepath.Join(e.dir, "state2")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := second.Serve(ctx, e.sock); err == nil || !strings.Contains(err.Error(), "another runtime") {
		t.Errorf("Serve on a live socket = %v, want an error about another runtime", err)
	}
	if _, err := e.rs.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Errorf("the first runtime stopped answering: %v", err)
	}
}

// TestRuntimeWithoutBinDirOnlyStops covers `kubeboot lab down`, which needs
// no binaries: such a runtime stops containers but refuses to serve.
func TestRuntimeWithoutBinDirOnlyStops(t *testing.T) {
	rt, err := lab.NewRuntime(lab.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.StopAll(context.Background()); err != nil {
		t.Errorf("StopAll: %v", err)
	}
	if err := rt.Serve(context.Background(), filepath.Join(t.TempDir(), "s.sock")); err == nil || !strings.Contains(err.Error(), "no BinDir") {
		t.Errorf("Serve without a bin dir = %v, want a refusal", err)
	}
}

func TestNewRuntimeErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		opts lab.Options
		want string
	}{
		{"no state dir", lab.Options{BinDir: dir}, "StateDir is required"},
		{"missing bin dir", lab.Options{BinDir: filepath.Join(dir, "nope"), StateDir: dir}, "open bin dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lab.NewRuntime(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewRuntime = %v, want error containing %q", err, tc.want)
			}
		})
	}
}

func TestStopAll(t *testing.T) {
	e := newEnv(t)
	sb, _ := e.runSandbox("pod")
	a := e.run(sb, shConfig("a", "exec sleep 30"))
	b := e.run(sb, shConfig("b", "trap '' TERM; sleep 30"))
	pidB := e.pid(b)
	e.waitIgnoresTERM(pidB)

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := e.rt.StopAll(ctx); err != nil {
		t.Fatal(err)
	}
	if st := e.status(a); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 143 {
		t.Errorf("a: state %s exit %d, want exited by SIGTERM (143)", st.State, st.ExitCode)
	}
	if st := e.status(b); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 137 {
		t.Errorf("b: state %s exit %d, want killed (137) once ctx was done", st.State, st.ExitCode)
	}
	if !groupGone(pidB) {
		t.Errorf("processes of b's group %d still run", pidB)
	}
	resp, err := e.rs.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("sandbox state = %s, want NOTREADY", resp.Status.State)
	}
}
