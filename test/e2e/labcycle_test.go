//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestLabUpDownUp is `make lab` as a new user runs it: up, down and up
// again; then up interrupted (SIGINT) once its kubelet runs, and up once
// more. Every up ends with a healthy control plane, and down leaves
// nothing of the node's dir, so nothing the next up would misread.
func TestLabUpDownUp(t *testing.T) {
	n := newNode(t, "cycle", "127.0.0.5")
	up := func(when string) {
		t.Helper()
		r := n.labUp(t)
		_, res, err := parseJSONOutput(r.stdout)
		if err != nil {
			t.Fatalf("lab up %s: -o json output: %v\nstderr: %s", when, err, r.stderr)
		}
		if r.code != 0 || !sameSet(res.Healthy, components) {
			t.Fatalf("lab up %s exited %d, healthy %v: %s\nstderr: %s", when, r.code, res.Healthy, res.Error, r.stderr)
		}
		t.Logf("lab up %s: healthy in %s", when, r.took.Round(time.Millisecond))
	}
	down := func() {
		t.Helper()
		if r := n.kubeboot(t, "lab", "down", "--config", n.config, "--bin-dir", binDir); r.code != 0 {
			t.Fatalf("lab down exited %d:\n%s", r.code, r.stderr)
		}
		// Nothing of init's is left for the next lab up to misread.
		if _, err := os.Stat(n.dir); !os.IsNotExist(err) {
			t.Errorf("lab down left %s (%v): %s", n.dir, err, strings.Join(kubebootFiles(t, n), ", "))
		}
	}
	up("on a new node")
	down()
	up("after lab down")
	down()
	interruptedUp(t, n)
	up("after an interrupted lab up")
}

// interruptedUp starts lab up and sends it SIGINT once its kubelet runs.
func interruptedUp(t *testing.T, n *node) {
	t.Helper()
	n.labStarted = true
	cmd := exec.Command(kubebootBin, "lab", "up", "--config", n.config, "--bin-dir", binDir, "-o", "json")
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
		if strings.Contains(sc.Text(), `"stage":"`+"kubelet-started"+`"`) && !started {
			started = true
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
		}
	}
	err = cmd.Wait()
	if !started {
		t.Fatalf("lab up ended (%v) before its kubelet started:\n%s", err, stderr.String())
	}
	if err == nil {
		t.Fatalf("lab up interrupted once its kubelet ran exited 0:\n%s", stderr.String())
	}
	t.Logf("lab up, interrupted once its kubelet ran: %v", err)
}
