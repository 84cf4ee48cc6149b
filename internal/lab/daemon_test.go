package lab_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/lab"
)

func TestDaemonLifecycle(t *testing.T) {
	d := lab.Daemon{Name: "sleeper", Dir: t.TempDir()}
	if err := d.Start("/bin/sh", "-c", "echo started; exec sleep 60"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop(time.Second) })
	pid, ok := d.Running()
	if !ok {
		t.Fatal("the daemon does not run after Start")
	}
	// On a loaded machine the shell may not have printed yet.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if log, _ := os.ReadFile(d.LogFile()); len(log) > 0 {
			break
		}
	}
	if err := d.Start("/bin/true"); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("already runs as pid %d", pid)) {
		t.Errorf("a second Start = %v, want a refusal naming pid %d", err, pid)
	}
	if err := d.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Running(); ok {
		t.Error("the daemon still runs after Stop")
	}
	if _, err := os.Stat(d.PidFile()); !os.IsNotExist(err) {
		t.Errorf("pid file left behind: %v", err)
	}
	if log, _ := os.ReadFile(d.LogFile()); string(log) != "started\n" {
		t.Errorf("log = %q, want the daemon's output", log)
	}
}

// TestDaemonIgnoresRecycledPid: a pid file whose start time does not match
// the live process with that pid is stale, so Stop must not signal it.
func TestDaemonIgnoresRecycledPid(t *testing.T) {
	d := lab.Daemon{Name: "stale", Dir: t.TempDir()}
	if err := os.WriteFile(d.PidFile(), fmt.Appendf(nil, "%d 1\n", os.Getpid()), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Running(); ok {
		t.Fatal("a recycled pid counts as the daemon")
	}
	if err := d.Stop(time.Second); err != nil {
		t.Fatal(err)
	}
}
