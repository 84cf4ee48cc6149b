//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestLabUpDownUp is a lab's life as a user lives it: lab up and lab
// down; lab up interrupted (SIGINT) once its node reports its own
// progress, and lab down; then up again. Every up ends with the node
// Ready, and every down leaves nothing of the lab on the host, so nothing
// the next up would misread.
func TestLabUpDownUp(t *testing.T) {
	alongside(t)
	c := startMachineCluster(t, "cycle", "10.89.26.0/24", "10.244.0.0/16", "\n- {name: cp1, role: control-plane}\n")
	before := hostNetworkState(t, c.name)
	up := func(when string) {
		t.Helper()
		r := runCommand(t, kubebootBin, "lab", "up", "--cluster", c.desc, "--bin-dir", binDir, "--package", kubebootDeb, "-o", "json")
		if r.code != 0 {
			t.Fatalf("lab up %s exited %d:\n%s", when, r.code, r.stderr)
		}
		c.readyNodes(t, 1)
		t.Logf("lab up %s: the node Ready in %s", when, r.took.Round(time.Millisecond))
	}
	down := func() {
		t.Helper()
		r := runCommand(t, kubebootBin, "lab", "down", "--cluster", c.desc)
		if r.code != 0 {
			t.Fatalf("lab down exited %d:\n%s", r.code, r.stderr)
		}
		t.Logf("lab down took %s", r.took.Round(time.Millisecond))
		after := hostNetworkState(t, c.name)
		if !slices.Equal(before.namespaces, after.namespaces) || !slices.Equal(before.links, after.links) {
			t.Errorf("after lab down, the host's network differs:\nbefore %v %v\nafter  %v %v", before.namespaces, before.links, after.namespaces, after.links)
		}
		if left := processesUnder(c.root); len(left) > 0 {
			t.Errorf("after lab down, processes of the lab remain:\n%s", describe(left))
		}
		if _, err := os.Stat(filepath.Join(c.root, "c")); !os.IsNotExist(err) {
			t.Errorf("lab down left the lab's directory (%v)", err)
		}
	}
	up("on a new host")
	down()
	interruptedUp(t, c)
	down()
	up("after an interrupted lab up")
}

// interruptedUp starts lab up and sends it SIGINT once its node reports
// its own progress: the machine booted and its bootstrap under way.
func interruptedUp(t *testing.T, c *machineCluster) {
	t.Helper()
	cmd := exec.Command(kubebootBin, "lab", "up", "--cluster", c.desc, "--bin-dir", binDir, "--package", kubebootDeb, "-o", "json")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(commandTimeout, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	started := false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"phase":"cp1/`) && !started {
			started = true
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
		}
	}
	err = cmd.Wait()
	if !started {
		t.Fatalf("lab up ended (%v) before its node reported progress:\n%s", err, stderr.String())
	}
	if err == nil {
		t.Fatalf("lab up interrupted while its node came up exited 0:\n%s", stderr.String())
	}
	t.Logf("lab up, interrupted while its node came up: %v", err)
}
