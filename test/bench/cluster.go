package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	labmachine "github.com/kubeboot/kubeboot/internal/machine"
)

// A cluster job is one `kubeboot lab up --cluster` of a lab of machines,
// timed from its events (labevents.go), and then `lab down --cluster`.
const (
	// jobKubebootInit and jobKubeadmInit are one control-plane node that
	// kubeboot init or the real kubeadm init brings up.
	jobKubebootInit = "kubeboot init"
	jobKubeadmInit  = "kubeadm init"
	// jobKubeadmJoin is a control plane and one worker, w1, that joins
	// with the real kubeadm join. Its kubeboot half is scaleJob(1): the
	// same worker slot joined with kubeboot join, in the same round.
	jobKubeadmJoin = "kubeadm join"
	// jobUsable is a control plane with two kubeboot workers, until a pod
	// on a worker resolves a Service and connects to its ClusterIP; it is
	// also the scale series' N = 2.
	jobUsable = "usable cluster"
	// jobHA is three control-plane nodes, the second and third joining
	// with kubeboot join --control-plane.
	jobHA = "three control planes"
)

// scaleSizes are the numbers of workers that join at once in the scale
// series; scaleJob names each job (N = 2 is jobUsable).
var scaleSizes = []int{1, 2, 4, 8}

func scaleJob(n int) string {
	if n == 2 {
		return jobUsable
	}
	return fmt.Sprintf("%d workers at once", n)
}

// clusterJobs are the jobs in their order in round 0; each round rotates
// it. The warm-up rounds run the first four only: both bring-ups and both
// joins.
var clusterJobs = []string{jobKubebootInit, jobKubeadmInit, scaleJob(1), jobKubeadmJoin, jobUsable, scaleJob(4), scaleJob(8), jobHA}

// warmupJobs is how many of clusterJobs a warm-up round runs.
const warmupJobs = 4

// clusterSubnet and clusterPods are the bench clusters' networks, apart
// from those of the end-to-end tests.
const (
	clusterSubnet = "10.89.30.0/24"
	clusterPods   = "10.249.0.0/16"
)

// firstNode is the node that inits the cluster in every job.
const firstNode = "cp1"

// clusterRun is one cluster job's measurement.
type clusterRun struct {
	job string
	// start and end bound the `lab up --cluster` command; probed is when
	// the usable cluster's probe first succeeded.
	start, end, probed time.Time
	// labUp is what lab up's events showed, with cp1's stageStarted.
	labUp
	// usage samples the control plane's processes during lab up.
	usage []usage
	// floor is Kubernetes' own start, read from the usable cluster.
	floor floor
	// apply is upgrade apply with nothing to change on the usable
	// cluster's cp1.
	apply applyRun
}

// clusterResults are every timed run of each job, in round order.
type clusterResults map[string][]clusterRun

// measureClusters runs the cluster jobs: warm-up rounds, then timed ones,
// each round in a rotating order. The event streams of the last round are
// kept in the raw dir.
func measureClusters(ctx context.Context, o options, work string, all, warmup []string) (clusterResults, error) {
	results := clusterResults{}
	rounds := o.clusterWarmup + o.clusterRuns
	for round := range rounds {
		timed := round >= o.clusterWarmup
		jobs := all
		if !timed {
			jobs = warmup
		}
		for k := range jobs {
			job := jobs[(k+round)%len(jobs)]
			logf("cluster: round %d/%d (%s): %s", round+1, rounds, map[bool]string{true: "timed", false: "warm-up"}[timed], job)
			// Every round's events are kept, so that an outlier among the
			// rounds can be read back.
			keep := filepath.Join(o.rawDir, "timelines", fmt.Sprintf("%s-round%d.jsonl", slug(job), round+1))
			run, err := runCluster(ctx, o, work, job, keep)
			if err != nil {
				return nil, fmt.Errorf("%s, round %d: %w", job, round+1, err)
			}
			if timed {
				results[job] = append(results[job], run)
			}
		}
	}
	return results, nil
}

// description is the lab description of a job: a lab of machines.
func description(job, dir string) string {
	nodes := "- {name: cp1, role: control-plane}\n"
	switch job {
	case jobKubeadmInit:
		nodes = "- {name: cp1, role: control-plane, init: kubeadm}\n"
	case jobKubeadmJoin:
		nodes += "- {name: w1, role: worker, join: kubeadm}\n"
	case jobHA:
		nodes += "- {name: cp2, role: control-plane}\n- {name: cp3, role: control-plane}\n"
	}
	for _, n := range scaleSizes {
		if job == scaleJob(n) {
			for i := range n {
				nodes += fmt.Sprintf("- {name: w%d, role: worker}\n", i+1)
			}
		}
	}
	return fmt.Sprintf("apiVersion: kubeboot.io/v1alpha1\nkind: LabCluster\nname: kbb\ndir: %s\nsubnet: %s\npodSubnet: %s\nnodes:\n%s",
		dir, clusterSubnet, clusterPods, nodes)
}

// runCluster brings one job's cluster up, reads its nodes' stages from
// lab up's events, probes it, and tears it down. The events are kept in
// the file keep.
func runCluster(ctx context.Context, o options, work, job, keep string) (clusterRun, error) {
	run := clusterRun{job: job}
	dir := filepath.Join(work, "cluster")
	file := filepath.Join(work, "cluster.yaml")
	if err := os.WriteFile(file, []byte(description(job, dir)), 0o600); err != nil {
		return run, err
	}
	sampling, stopSampling := context.WithCancel(ctx)
	samples := sampleControlPlane(sampling, labmachine.Machine{Name: firstNode, Dir: filepath.Join(dir, firstNode)})
	run.start = time.Now()
	out, upErr := kubebootJSON(ctx, o, 15*time.Minute, "lab", "up", "--cluster", file, "--bin-dir", o.binDir, "--package", o.pkg, "-o", "json")
	run.end = time.Now()
	stopSampling()
	run.usage = <-samples
	var stagesErr, probeErr error
	if run.labUp, stagesErr = parseLabUp(out); stagesErr == nil {
		stagesErr = run.missing()
	}
	if upErr == nil && stagesErr == nil && !slices.Contains(run.kubeadm, firstNode) {
		var started time.Time
		started, stagesErr = unitStart(ctx, o, file, firstNode)
		run.nodes[firstNode][stageStarted] = started
	}
	if upErr == nil && job == jobUsable {
		run.probed, probeErr = probeService(ctx, o, filepath.Join(dir, "kubeconfig"), "w1")
		if probeErr == nil {
			run.floor, probeErr = readFloor(ctx, o, filepath.Join(dir, "kubeconfig"))
		}
		if probeErr == nil {
			run.apply, probeErr = measureApply(ctx, o, file)
		}
	}
	keepErr := keepEvents(keep, out)
	_, downErr := kubebootJSON(context.WithoutCancel(ctx), o, 3*time.Minute, "lab", "down", "--cluster", file, "--bin-dir", o.binDir)
	if err := errors.Join(upErr, stagesErr, probeErr, keepErr, downErr); err != nil {
		return run, err
	}
	return run, leftovers(dir)
}

// slug is a job's name as a file name.
func slug(job string) string { return strings.ReplaceAll(job, " ", "-") }

// keepEvents writes lab up's output to path.
func keepEvents(path string, out []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

// unitStart is when node's bootstrap unit started: its systemd's
// ExecMainStartTimestampMonotonic, read with `lab exec`. The machines
// share the host's clocks (no time namespace), so the host's offset of
// the wall clock over CLOCK_MONOTONIC turns it into a time.
func unitStart(ctx context.Context, o options, file, node string) (time.Time, error) {
	out, err := kubebootJSON(ctx, o, time.Minute, "lab", "exec", "--cluster", file, "--bin-dir", o.binDir, node, "--",
		"systemctl", "show", "--property=ExecMainStartTimestampMonotonic", "--value", "kubeboot-bootstrap")
	if err != nil {
		return time.Time{}, err
	}
	usec, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil || usec <= 0 {
		return time.Time{}, fmt.Errorf("node %s: kubeboot-bootstrap's ExecMainStartTimestampMonotonic is %q, not a time", node, out)
	}
	return monotonicToTime(time.Duration(usec) * time.Microsecond)
}

// monotonicToTime is the wall time at which CLOCK_MONOTONIC read mono.
func monotonicToTime(mono time.Duration) (time.Time, error) {
	now, err := monotonicNow()
	if err != nil {
		return time.Time{}, err
	}
	return time.Now().Add(mono - now), nil
}

// monotonicNow reads CLOCK_MONOTONIC, systemd's clock of its
// ...Monotonic timestamps.
func monotonicNow() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, err
	}
	return time.Duration(ts.Nano()), nil
}

// probeService runs a pod on node and returns when it first resolved the
// kubernetes Service's name and connected to its ClusterIP, through
// CoreDNS and kube-proxy.
func probeService(ctx context.Context, o options, kubeconfig, node string) (time.Time, error) {
	kubectl := func(args ...string) error {
		cmd := exec.CommandContext(ctx, filepath.Join(o.binDir, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, lastLines(string(out), 5))
		}
		return nil
	}
	overrides := fmt.Sprintf(`{"spec":{"nodeName":%q}}`, node)
	if err := kubectl("run", "probe", "--image", agnhostImage, "--image-pull-policy", "Never", "--overrides", overrides, "--", "pause"); err != nil {
		return time.Time{}, err
	}
	if err := kubectl("wait", "--for=condition=Ready", "pod/probe", "--timeout=2m"); err != nil {
		return time.Time{}, err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := kubectl("exec", "probe", "--", "/agnhost", "connect", "--timeout=2s", "kubernetes.default.svc.cluster.local:443")
		if err == nil {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("the probe pod on %s never reached the kubernetes Service: %w", node, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// agnhostImage is the lab's agnhost (lab.AgnhostImage).
const agnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"

// workers are the run's worker nodes' names.
func (r clusterRun) workers() []string {
	var names []string
	for name := range r.nodes {
		if strings.HasPrefix(name, "w") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// joinWindow is from the first worker reaching the cluster to the last
// worker's Node Ready.
func (r clusterRun) joinWindow() (from, to time.Time) {
	for i, w := range r.workers() {
		s, e := r.nodes[w][stageClusterReached], r.nodes[w][stageNodeReady]
		if i == 0 || s.Before(from) {
			from = s
		}
		if e.After(to) {
			to = e
		}
	}
	return from, to
}

// lastUp is when the last node was up.
func (r clusterRun) lastUp() time.Time {
	var last time.Time
	for _, s := range r.nodes {
		if s[stageUp].After(last) {
			last = s[stageUp]
		}
	}
	return last
}
