package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// A cluster job is one `kubeboot lab up --cluster` of a lab description,
// timed from each node's staged events (see the stage constants of
// cmd/kubeboot/app/lab.go), and then `lab down --cluster`.
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

// nodeStages are one node's stage times, from its lab-up.json.
type nodeStages map[string]time.Time

// clusterRun is one cluster job's measurement.
type clusterRun struct {
	job string
	// start and end bound the `lab up --cluster` command; probed is when
	// the usable cluster's probe first succeeded.
	start, end, probed time.Time
	nodes              map[string]nodeStages
	// usage samples the control plane's processes during lab up.
	usage []usage
}

// clusterResults are every timed run of each job, in round order.
type clusterResults map[string][]clusterRun

// measureClusters runs the cluster jobs: warm-up rounds, then timed ones,
// each round in a rotating order. The node timelines of the last round are
// kept in the raw dir.
func measureClusters(ctx context.Context, o options, work string) (clusterResults, error) {
	results := clusterResults{}
	rounds := o.clusterWarmup + o.clusterRuns
	for round := range rounds {
		timed := round >= o.clusterWarmup
		jobs := clusterJobs
		if !timed {
			jobs = clusterJobs[:warmupJobs]
		}
		for k := range jobs {
			job := jobs[(k+round)%len(jobs)]
			logf("cluster: round %d/%d (%s): %s", round+1, rounds, map[bool]string{true: "timed", false: "warm-up"}[timed], job)
			keep := ""
			if round == rounds-1 {
				keep = filepath.Join(o.rawDir, "timelines", strings.ReplaceAll(job, " ", "-"))
			}
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

// description is the lab description of a job.
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

// profiled are the jobs whose last round keeps kubeboot's CPU profiles:
// the bring-up and the join.
var profiled = []string{jobKubebootInit, scaleJob(1)}

// runCluster brings one job's cluster up, probes it, reads its nodes'
// stages, copies their timelines to keep (if set), and tears it down.
func runCluster(ctx context.Context, o options, work, job, keep string) (clusterRun, error) {
	run := clusterRun{job: job, nodes: map[string]nodeStages{}}
	dir := filepath.Join(work, "cluster")
	file := filepath.Join(work, "cluster.yaml")
	if err := os.WriteFile(file, []byte(description(job, dir)), 0o600); err != nil {
		return run, err
	}
	var env []string
	if keep != "" && slices.Contains(profiled, job) {
		if err := os.MkdirAll(keep, 0o755); err != nil {
			return run, err
		}
		env = append(env, "KUBEBOOT_CPU_PROFILE="+filepath.Join(keep, "kubeboot.pprof"))
	}
	sampling, stopSampling := context.WithCancel(ctx)
	samples := sampleControlPlane(sampling, filepath.Join(dir, "cp1")+"/")
	run.start = time.Now()
	_, upErr := kubebootEnv(ctx, o, 10*time.Minute, env, "lab", "up", "--cluster", file, "--bin-dir", o.binDir, "-o", "json")
	run.end = time.Now()
	stopSampling()
	run.usage = <-samples
	var probeErr error
	if upErr == nil && job == jobUsable {
		run.probed, probeErr = probeService(ctx, o, filepath.Join(dir, "kubeconfig"), "w1")
	}
	stagesErr := readStages(dir, &run, keep)
	if len(env) > 0 {
		// Every node's lab up wrote its profile at its exit.
		for node := range run.nodes {
			if _, err := os.Stat(filepath.Join(keep, "kubeboot-"+node+".pprof")); err != nil {
				stagesErr = errors.Join(stagesErr, fmt.Errorf("no CPU profile of node %s: %w", node, err))
			}
		}
	}
	_, downErr := kubebootJSON(context.WithoutCancel(ctx), o, 3*time.Minute, "lab", "down", "--cluster", file, "--bin-dir", o.binDir)
	if err := errors.Join(upErr, probeErr, stagesErr, downErr); err != nil {
		return run, err
	}
	return run, leftovers(dir)
}

// readStages reads every node's stages from its lab-up.json.
func readStages(dir string, run *clusterRun, keep string) error {
	logs, err := filepath.Glob(filepath.Join(dir, "*", "lab-up.json"))
	if err != nil {
		return err
	}
	if len(logs) == 0 {
		return fmt.Errorf("no node's lab-up.json in %s", dir)
	}
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err != nil {
			return err
		}
		node := filepath.Base(filepath.Dir(l))
		if keep != "" {
			if err := os.MkdirAll(keep, 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(keep, node+".json"), data, 0o644); err != nil {
				return err
			}
		}
		stages := nodeStages{}
		events, err := readEvents(data)
		if err != nil {
			return fmt.Errorf("%s: %w", l, err)
		}
		for _, e := range events {
			if e.Stage != "" {
				stages[e.Stage] = e.Time
			}
		}
		run.nodes[node] = stages
	}
	return nil
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

// span is the time from stage a of node na to stage b of node nb; false if
// either is missing.
func (r clusterRun) span(na, a, nb, b string) (time.Duration, bool) {
	ta, ok1 := r.nodes[na][a]
	tb, ok2 := r.nodes[nb][b]
	return tb.Sub(ta), ok1 && ok2
}

// toolEnd is the stage at which the tool on node returned: kubeadm's exit,
// or the end of kubeboot's workflow.
func (r clusterRun) toolEnd(node string) string {
	if _, ok := r.nodes[node]["kubeadm-exited"]; ok {
		return "kubeadm-exited"
	}
	return "workflow-done"
}

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

// joinWindow is from the first worker's bootstrap-started to the last
// worker's Ready (workflow-done).
func (r clusterRun) joinWindow() (from, to time.Time) {
	for i, w := range r.workers() {
		s, e := r.nodes[w]["bootstrap-started"], r.nodes[w]["workflow-done"]
		if i == 0 || s.Before(from) {
			from = s
		}
		if e.After(to) {
			to = e
		}
	}
	return from, to
}
