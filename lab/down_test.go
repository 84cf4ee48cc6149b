package lab

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// startFake runs a shell under the name given, with args after its script,
// that waits until the test ends; it returns the running command.
func startFake(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(sh)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o755); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, append([]string{"-c", "read line"}, args...)...)
	cmd.Stdin = r
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	t.Cleanup(func() {
		_ = w.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

func TestKillShimsKillsOnlyTheNodesShims(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "cri.sock")
	other := filepath.Join(t.TempDir(), "cri.sock")
	shim := startFake(t, "containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", "abc", "-address", socket)
	otherShim := startFake(t, "containerd-shim-runc-v2", "-address", other)
	notShim := startFake(t, "containerd", "-address", socket)

	if got := shimsOf(socket); !slices.Equal(got, []int{shim.Process.Pid}) {
		t.Fatalf("shimsOf(%s) = %v, want [%d]", socket, got, shim.Process.Pid)
	}
	done := make(chan error, 1)
	go func() { done <- shim.Wait() }()
	if killed, err := killShims(socket, 5*time.Second); killed != 1 || err != nil {
		t.Errorf("killShims killed %d (%v), want 1", killed, err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Error("the shim exited cleanly, want killed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the node's shim still runs after killShims")
	}
	for _, c := range []*exec.Cmd{otherShim, notShim} {
		if _, state, err := readProc(c.Process.Pid); err != nil || state == 'Z' {
			t.Errorf("%s (pid %d) was killed: only the node's shims may be", c.Path, c.Process.Pid)
		}
	}
	if got := shimsOf(socket); len(got) != 0 {
		t.Errorf("shims of the node left: %v", got)
	}
}
