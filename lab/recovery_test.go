package lab_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestRestartRecovery kills a runtime process for real (SIGKILL, no
// cleanup), starts a new runtime on the same state dir, and checks what it
// makes of a container that kept running and one that died meanwhile.
func TestRestartRecovery(t *testing.T) {
	e := newDirs(t)
	old := exec.Command(os.Args[0], "-test.run=^$")
	old.Env = append(os.Environ(), serveSocketEnv+"="+e.sock, serveBinEnv+"="+e.binDir, serveStateEnv+"="+e.stateDir)
	old.Stderr = newTestWriter(t)
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = old.Process.Kill()
		_ = old.Wait()
	})
	ctx := context.Background()
	eventually(t, 10*time.Second, "the old runtime answers Version", func() bool {
		_, err := e.rs.Version(ctx, &runtimeapi.VersionRequest{})
		return err == nil
	})

	sb, _ := e.runSandbox("pod")
	survivor := e.run(sb, shConfig("survivor", "i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.02; done"))
	victim := e.run(sb, shConfig("victim", "exec sleep 30"))
	created := e.create(sb, shConfig("created", "true"))
	survivorPID, victimPID := e.pid(survivor), e.pid(victim)
	t.Cleanup(func() { // the processes are nobody's children after the kill
		_ = syscall.Kill(-survivorPID, syscall.SIGKILL)
		_ = syscall.Kill(-victimPID, syscall.SIGKILL)
	})
	before := e.status(survivor)
	logPath := before.LogPath

	if err := old.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = old.Wait() // killed: the error says so
	if err := syscall.Kill(victimPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the victim is dead", func() bool { return !processRunning(victimPID) })
	// The survivor goes on writing while no runtime reads; its writes must
	// neither fail nor kill it.
	time.Sleep(200 * time.Millisecond)
	if !processRunning(survivorPID) {
		t.Fatal("the survivor died with its runtime")
	}

	e.start() // on the same state dir and socket, which the dead runtime left behind

	st := e.status(survivor)
	if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || st.StartedAt != before.StartedAt || e.pid(survivor) != survivorPID {
		t.Errorf("survivor after restart: %v, want running since %d with pid %d", st, before.StartedAt, survivorPID)
	}
	st = e.status(victim)
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 255 || st.Reason != "Unknown" || st.FinishedAt < st.StartedAt {
		t.Errorf("victim after restart: %v, want exited with unknown exit code 255", st)
	}
	if st := e.status(created); st.State != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Errorf("created container after restart: %s", st.State)
	}
	resp, err := e.rs.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb})
	if err != nil || resp.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("sandbox after restart: %v, %v", resp.GetStatus(), err)
	}

	// The new runtime drains what was written meanwhile and goes on copying.
	n := len(parseLog(t, readLog(t, logPath)))
	eventually(t, 5*time.Second, "the survivor's output reaches the log again", func() bool {
		return len(parseLog(t, readLog(t, logPath))) > n+10
	})
	records := parseLog(t, readLog(t, logPath))
	for i, r := range records {
		if want := "tick " + strconv.Itoa(i); r.content != want {
			t.Fatalf("log record %d is %q, want %q: output was lost or reordered across the restart", i, r.content, want)
		}
	}

	// The survivor is not the new runtime's child, but it can still stop it.
	if _, err := e.rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: survivor, Timeout: 5}); err != nil {
		t.Fatal(err)
	}
	st = e.status(survivor)
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 255 || st.Reason != "Unknown" {
		t.Errorf("survivor after stop: %v, want exited with unknown exit code 255", st)
	}
	if processRunning(survivorPID) || !groupGone(survivorPID) {
		t.Errorf("the survivor's process group %d still runs", survivorPID)
	}
}
