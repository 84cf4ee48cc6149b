//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCrashAndConverge is scenario 4: kubeboot init, killed with SIGKILL at
// random moments on a fresh node, never leaves a file the kubelet or the
// next run would misread, the next run converges from what it left, and a
// full init then brings a healthy control plane up from the partial state.
func TestCrashAndConverge(t *testing.T) {
	alongside(t)
	n := newNode(t, "crash", "10.89.22.0/24")
	// RSA keys take long enough to generate that kills land inside the PKI writes.
	n.config = n.writeConfig(t, "kubeboot.yaml", map[string]any{"certificates.keyAlgorithm": "rsa-2048"})

	// The first run pays for cold caches: the faster of two is the measure.
	var fullRun time.Duration
	for i := range 2 {
		if i > 0 {
			wipe(t, n)
		}
		r := n.kubeboot(t, "init", "--config", n.config, "--skip-phases", livePhases)
		if r.code != 0 {
			t.Fatalf("a full write run exited %d:\n%s", r.code, r.stderr)
		}
		if fullRun == 0 || r.took < fullRun {
			fullRun = r.took
		}
	}
	t.Run("every key written, no certificate yet", func(t *testing.T) { testKeysWithoutCerts(t, n) })
	wipe(t, n)
	t.Run("random kills", func(t *testing.T) { testRandomKills(t, n, fullRun) })
	t.Run("init converges", func(t *testing.T) {
		start := time.Now()
		up := n.up(t)
		_, res, err := parseJSONOutput(up.stdout)
		if err != nil {
			t.Fatalf("init -o json output: %v\nstderr: %s", err, up.stderr)
		}
		if up.code != 0 || !sameSet(res.Healthy, components) {
			t.Fatalf("init from the crashed state exited %d, healthy %v: %s\nstderr: %s", up.code, res.Healthy, res.Error, up.stderr)
		}
		t.Logf("init converged from the crashed state to a healthy control plane in %s", time.Since(start).Round(time.Millisecond))
		if temps := tempFiles(n.path("manifests")); len(temps) > 0 {
			t.Errorf("temp files remain in the manifest dir after a successful run: %v", temps)
		}
		var elsewhere []string
		for _, dir := range []string{n.dir, n.path("pki"), n.path("pki/etcd"), n.path("kubeboot/staged"), n.path("kubelet")} {
			elsewhere = append(elsewhere, tempFiles(dir)...)
		}
		t.Logf("temp files left by the kills outside the manifest dir (no run removes them): %d %v", len(elsewhere), elsewhere)
	})
}

// testKeysWithoutCerts recreates, without timing luck, the state a kill
// leaves between the certs phase's two write passes (every key first, then
// every certificate): all keys, no certificate, nothing after. The next run
// must converge from it.
func testKeysWithoutCerts(t *testing.T, n *node) {
	var removed []string
	err := filepath.WalkDir(n.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) == ".key" {
			return err
		}
		removed = append(removed, path)
		return os.Remove(path)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) == 0 {
		t.Fatal("the full write run left nothing but keys")
	}
	r := n.kubeboot(t, "init", "--config", n.config, "--skip-phases", livePhases)
	if r.code != 0 {
		t.Errorf("init cannot converge from the state a kill between the key and certificate writes leaves "+
			"(every key, no certificate): exit %d\n%s", r.code, r.stderr)
	}
	if problems := crashStateProblems(t, n); len(problems) > 0 {
		t.Errorf("after the run:\n  %s", strings.Join(problems, "\n  "))
	}
}

// testRandomKills kills init at random moments, keeping the partial state
// between kills. A kill that lands in the wait phase found every file
// written: the next run starts a new cycle on a fresh node, so that kills
// keep landing in writes. A run that fails on the state a kill left is a
// failure found; the next run starts a new cycle too.
func testRandomKills(t *testing.T, n *node, fullRun time.Duration) {
	const (
		minKills = 30
		// The writes take a small part of a run, after the keys are
		// generated: keep killing until enough kills landed among them,
		// or the budget is spent (a loaded machine stretches the runs).
		wantKillsInWrites = 15
		budget            = 3 * time.Minute
		maxRuns           = 400
	)
	maxDelay := fullRun * 3 / 2
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("a full write run takes %s; kill delays are uniform in [0, %s); seed %d",
		fullRun.Round(time.Millisecond), maxDelay.Round(time.Millisecond), seed)

	kills, inWrites, cycles, badStates := 0, 0, 1, 0
	phases := map[string]int{}
	stuck := map[string]int{}
	fresh := false
	start := time.Now()
	enough := func() bool {
		return kills >= minKills && !fresh && (inWrites >= wantKillsInWrites || time.Since(start) > budget)
	}
	for run := 0; !enough() && run < maxRuns; run++ {
		if fresh {
			wipe(t, n)
			cycles++
		}
		delay := time.Duration(rng.Int64N(int64(maxDelay)))
		k := killInit(t, n, delay)
		switch {
		case k.killed:
			kills++
			phases[k.phase]++
			if slices.Contains(writePhases, k.phase) {
				inWrites++
			}
		default:
			// Without a kubelet the wait phase runs far longer than any
			// delay: an exit means init failed on the state it found.
			if stuck[k.stderr]++; stuck[k.stderr] == 1 {
				t.Errorf("after kill %d, init exits %d on the state the kill left instead of converging:\n%s\nstate:\n%s",
					kills, k.code, k.stderr, listFiles(n.dir))
			}
		}
		fresh = !k.killed || k.phase == "wait" || k.phase == "bootstrap-admin"
		if problems := crashStateProblems(t, n); len(problems) > 0 {
			badStates++
			t.Errorf("after kill %d (%s after start, last phase %s):\n  %s", kills, delay.Round(time.Millisecond), k.phase, strings.Join(problems, "\n  "))
		}
	}
	failedRuns := 0
	for _, count := range stuck {
		failedRuns += count
	}
	t.Logf("SCENARIO 4: %d SIGKILLs (%d after the first write, before the wait phase) over %d fresh-node cycles; "+
		"kills by the last phase the run reported: %v; %d states with unreadable files; %d runs that could not converge (%d distinct errors)",
		kills, inWrites, cycles, phases, badStates, failedRuns, len(stuck))
	if !enough() {
		t.Fatalf("%d kills in %d runs (last state fresh: %v): want %d, ending in a partial state", kills, maxRuns, fresh, minKills)
	}
	if inWrites < wantKillsInWrites {
		t.Logf("only %d kills landed among the writes within the %s budget, %d wanted", inWrites, budget, wantKillsInWrites)
	}
}

// killed is what became of a run killInit started.
type killed struct {
	// killed says the kill landed; otherwise the run exited first.
	killed bool
	// phase is the phase of the last event the run printed.
	phase  string
	code   int
	stderr string
}

// killInit runs a full kubeboot init and sends it SIGKILL after delay.
// The machine's kubelet is not started with the node's configuration:
// kubelet-start is skipped.
func killInit(t *testing.T, n *node, delay time.Duration) killed {
	t.Helper()
	cmd := n.command(t, context.Background(), "kubeboot", "init", "--config", n.config, "--skip-phases", "kubelet-start", "-o", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	timer := time.NewTimer(delay)
	defer timer.Stop()
	k := killed{}
	select {
	case <-timer.C:
		// The group: nsenter and kubeboot inside the machine.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		waitGroupGone(t, cmd.Process.Pid)
		k.killed = true
	case <-done:
		k.code = cmd.ProcessState.ExitCode()
	}
	k.phase, k.stderr = lastEventPhase(stdout.String()), stderr.String()
	return k
}

// waitGroupGone waits until no process of group pgid runs: the kill
// reaches kubeboot inside the machine too, but cmd.Wait waits only for
// nsenter, and the node lock, an flock, is free only once kubeboot has
// exited. Without the wait, the next init could find it still held.
func waitGroupGone(t *testing.T, pgid int) {
	t.Helper()
	eventually(t, fmt.Sprintf("the killed init's process group %d gone", pgid), func() error {
		if pids := groupMembers(pgid); len(pids) > 0 {
			return fmt.Errorf("processes %v still run", pids)
		}
		return nil
	})
}

// groupMembers are the processes of group pgid that have not exited (a
// zombie, Z, or a dead process, X, holds no files any more).
func groupMembers(pgid int) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and ")".
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 3 || fields[0] == "Z" || fields[0] == "X" {
			continue
		}
		if group, err := strconv.Atoi(fields[2]); err == nil && group == pgid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// listFiles lists the regular files under dir, relative to it.
func listFiles(dir string) string {
	var b strings.Builder
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, path)
			fmt.Fprintf(&b, "  %s\n", rel)
		}
		return nil
	})
	return b.String()
}

// livePhases are the phases of init that start the kubelet or need a
// running control plane: tests that run init without a kubelet skip them.
const livePhases = "kubelet-start,wait,bootstrap-admin,upload-config,mark-control-plane,bootstrap-token,cluster-info,kubelet-finalize,csr-approver,addon/cni"

// writePhases are the phases that write files. A run reports the certs
// phase first when it has written its first file (preflight's event comes
// before the keys are generated), so a kill that leaves one of these as the
// last reported phase landed after the first write and before the wait.
var writePhases = []string{"certs", "kubeconfig", "kubelet-config", "apiserver-config", "etcd", "control-plane", "validate", "write-manifests"}

// lastEventPhase is the phase of the last complete JSON event line.
func lastEventPhase(stdout string) string {
	phase := "(none)"
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Phase != "" {
			phase = e.Phase
		}
	}
	return phase
}

// wipe removes everything kubeboot wrote for the node.
func wipe(t *testing.T, n *node) {
	t.Helper()
	if err := os.RemoveAll(n.dir); err != nil {
		t.Fatal(err)
	}
}

// tempFiles lists the dot-prefixed temp files of an atomic write in dir.
func tempFiles(dir string) []string {
	matches, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*"))
	return matches
}
