//go:build e2e && conformance

package e2e

import (
	"cmp"
	"context"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/lab"
	"github.com/kubeboot/kubeboot/internal/machine"
	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// pullOnly are the conformance tests that cannot run without a registry:
// they pull an image by design (an image volume whose pull policy is
// Always), and no registry is reachable here. Nothing else is skipped.
var pullOnly = []string{
	`[sig-node] ImageVolume should succeed with pod and pull policy of Always`,
}

// TestConformance runs Kubernetes' own conformance tests (e2e.test and
// ginkgo of v1.36.3, at $KUBEBOOT_E2E_TEST and its directory's ginkgo) on
// a lab of three machines that `lab up --cluster` brought up: a
// control-plane node, a `kubeboot join` worker and a `kubeadm join`
// worker, each holding the tests' images (conformanceImages). Every
// `[Conformance]` test but pullOnly runs, the parallel ones on three
// processes, then the `[Serial]` ones alone ($KUBEBOOT_CONFORMANCE_FOCUS,
// a regular expression, narrows them; $KUBEBOOT_CONFORMANCE_LABELS, a
// ginkgo label filter, runs other tests than the `Conformance` ones, such
// as NetworkPolicy's, `Feature:NetworkPolicy`; with
// $KUBEBOOT_CONFORMANCE_DUALSTACK=1 the lab is dual-stack, for the
// `Feature:IPv6DualStack` tests). ginkgo runs from this host in the
// control-plane node's network namespace. The test fails if a test failed
// or skipped itself while running, or a kubelet restarted meanwhile. It writes the JUnit reports to
// $KUBEBOOT_CONFORMANCE_REPORTS (default .cache/conformance) and, when
// $KUBEBOOT_CONFORMANCE_SUMMARY names a file, the summary to it. It is not
// part of `make test`: `make conformance` builds what it needs and runs it.
func TestConformance(t *testing.T) {
	e2eTest := os.Getenv("KUBEBOOT_E2E_TEST")
	if e2eTest == "" {
		t.Fatal("KUBEBOOT_E2E_TEST names the e2e.test binary of Kubernetes v1.36.3: run `make conformance`")
	}
	ginkgo := filepath.Join(filepath.Dir(e2eTest), "ginkgo")
	reports := os.Getenv("KUBEBOOT_CONFORMANCE_REPORTS")
	if reports == "" {
		reports = filepath.Join("..", "..", ".cache", "conformance")
	}
	reports, err := filepath.Abs(reports)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(reports, 0o755); err != nil {
		t.Fatal(err)
	}
	// Ctrl-C or a SIGTERM ends the runs (ginkgo ends its tests and their
	// namespaces), then the test fails, and its cleanup brings the lab
	// down, as after any failure.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	interrupted := func() {
		if ctx.Err() != nil {
			t.Fatal("interrupted: the lab is brought down")
		}
	}
	start := time.Now()
	subnet, podSubnet, nodes := "10.89.241.0/24", "10.245.0.0/16", "\n- {name: cp1, role: control-plane}\n- {name: w1, role: worker}\n- {name: w2, role: worker, join: kubeadm}\n"
	dualStack := os.Getenv("KUBEBOOT_CONFORMANCE_DUALSTACK") == "1"
	if dualStack {
		subnet, podSubnet = subnet+",fd89:0:0:241::/64", podSubnet+",fd10:245::/56"
		nodes += "serviceSubnet: 10.96.0.0/12,fd10:96::/112\n"
	}
	c := startMachineCluster(t, "mc", subnet, podSubnet, nodes)
	r := runCommand(t, kubebootBin, "lab", "up", "--cluster", c.desc, "--bin-dir", binDir, "--package", kubebootDeb)
	if r.code != 0 {
		t.Fatalf("lab up --cluster exited %d:\n%s", r.code, testsupport.LastLines(r.stderr, 40))
	}
	interrupted()
	machines := []machine.Machine{c.machine(t, "cp1"), c.machine(t, "w1"), c.machine(t, "w2")}
	archive := filepath.Join(c.lab.Cluster.Dir, "conformance.tar")
	if err := lab.WriteArchive(archive, conformanceImages(t)); err != nil {
		t.Fatal(err)
	}
	for _, m := range machines {
		if err := os.MkdirAll(filepath.Join(m.Root(), "root"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(archive, filepath.Join(m.Root(), "root/conformance.tar")); err != nil {
			t.Fatal(err)
		}
		inMachine(t, m, "ctr", "-n", "k8s.io", "images", "import", "/root/conformance.tar")
	}
	interrupted()
	t.Logf("TIMING: the lab up, with the tests' images in every node: %s", time.Since(start).Round(time.Second))
	// Each kubelet's process and systemd's count of its restarts.
	restarts := func() string {
		var out []string
		for _, m := range machines {
			out = append(out, m.Name+": "+strings.ReplaceAll(inMachine(t, m, "systemctl", "show", "kubelet", "-p", "MainPID", "-p", "NRestarts", "--value"), "\n", " "))
		}
		return strings.Join(out, "; ")
	}
	before := restarts()

	skip := make([]string, len(pullOnly))
	for i, name := range pullOnly {
		skip[i] = regexp.QuoteMeta(name)
	}
	labels := cmp.Or(os.Getenv("KUBEBOOT_CONFORMANCE_LABELS"), "Conformance")
	runs := []struct {
		name, labels string
		procs        int
	}{
		{"parallel", "(" + labels + ") && !Serial", 3},
		{"serial", "(" + labels + ") && Serial", 1},
	}
	var results []conformanceRun
	for _, run := range runs {
		junit := filepath.Join(reports, "junit_"+run.name+".xml")
		_ = os.Remove(junit)
		args := []string{"--net=/run/netns/" + c.lab.Cluster.Netns("cp1"), "--", ginkgo,
			"--procs", strconv.Itoa(run.procs), "--label-filter", run.labels, "--skip", strings.Join(skip, "|"),
			"--timeout", "4h", "--no-color", "--output-dir", reports, "--junit-report", filepath.Base(junit)}
		if focus := os.Getenv("KUBEBOOT_CONFORMANCE_FOCUS"); focus != "" {
			args = append(args, "--focus", focus)
		}
		args = append(args, e2eTest, "--",
			"--kubeconfig="+filepath.Join(machines[0].Root(), "etc/kubernetes/admin.conf"), "--provider=skeleton",
			// The nodes pods are scheduled to, which the tests that need
			// several ask for (SkipUnlessNodeCountIsAtLeast).
			"--num-nodes="+strconv.Itoa(len(machines)-1))
		// ginkgo's output goes to a log beside the report as it comes.
		logPath := filepath.Join(reports, run.name+".log")
		log, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		runStart := time.Now()
		cmd := exec.CommandContext(ctx, "nsenter", args...)
		cmd.Stdout, cmd.Stderr = log, log
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = 3 * time.Minute
		err = cmd.Run()
		took := time.Since(runStart)
		_ = log.Close()
		interrupted()
		out, rerr := os.ReadFile(logPath)
		if rerr != nil {
			t.Fatal(rerr)
		}
		res, rerr := readJUnit(junit)
		if rerr != nil {
			t.Fatalf("the %s run (ginkgo: %v) left no report: %v\n%s", run.name, err, rerr, testsupport.LastLines(string(out), 60))
		}
		res.Name, res.Took = run.name, took
		results = append(results, res)
		t.Logf("TIMING: the %s conformance tests (log %s): %s, %d passed, %d failed, %d skipped while running", run.name, logPath, took.Round(time.Second), len(res.Passed), len(res.Failed), len(res.SkippedRunning))
		for _, f := range res.Failed {
			t.Errorf("%s failed: %s", f.Name, firstLine(f.Reason))
		}
		for _, f := range res.SkippedRunning {
			t.Errorf("%s skipped itself while running: %s", f.Name, firstLine(f.Reason))
		}
		if err != nil && len(res.Failed) == 0 {
			t.Errorf("ginkgo's %s run failed without a failed test: %v\n%s", run.name, err, testsupport.LastLines(string(out), 60))
		}
	}
	if after := restarts(); after != before {
		t.Errorf("a kubelet restarted during the tests: before %q, after %q", before, after)
	}
	if path := os.Getenv("KUBEBOOT_CONFORMANCE_SUMMARY"); path != "" {
		summary := conformanceSummary{Runs: results, Skipped: pullOnly, Started: start, Took: time.Since(start), Focus: os.Getenv("KUBEBOOT_CONFORMANCE_FOCUS"), Labels: labels,
			Reports: ".cache/" + filepath.Base(reports) + "/", Target: filepath.Base(reports), DualStack: dualStack}
		if err := os.WriteFile(path, []byte(summary.markdown()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// firstLine is s up to its first line break.
func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}
