package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	// jobJoins is a control plane with two workers that join at once, one
	// with kubeboot join and one with the real kubeadm join.
	jobJoins = "kubeboot join + kubeadm join"
	// jobUsable is a control plane with two kubeboot workers, until a pod
	// on a worker resolves a Service and connects to its ClusterIP.
	jobUsable = "usable cluster"
)

// clusterJobs are the jobs in their order in round 0; each round rotates it.
var clusterJobs = []string{jobKubebootInit, jobKubeadmInit, jobJoins, jobUsable}

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
		for k := range clusterJobs {
			job := clusterJobs[(k+round)%len(clusterJobs)]
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
	nodes := map[string]string{
		jobKubebootInit: "- {name: cp1, role: control-plane}\n",
		jobKubeadmInit:  "- {name: cp1, role: control-plane, init: kubeadm}\n",
		jobJoins:        "- {name: cp1, role: control-plane}\n- {name: wk, role: worker}\n- {name: wa, role: worker, join: kubeadm}\n",
		jobUsable:       "- {name: cp1, role: control-plane}\n- {name: w1, role: worker}\n- {name: w2, role: worker}\n",
	}[job]
	return fmt.Sprintf("apiVersion: kubeboot.io/v1alpha1\nkind: LabCluster\nname: kbb\ndir: %s\nsubnet: %s\npodSubnet: %s\nnodes:\n%s",
		dir, clusterSubnet, clusterPods, nodes)
}

// runCluster brings one job's cluster up, probes it, reads its nodes'
// stages, copies their timelines to keep (if set), and tears it down.
func runCluster(ctx context.Context, o options, work, job, keep string) (clusterRun, error) {
	run := clusterRun{job: job, nodes: map[string]nodeStages{}}
	dir := filepath.Join(work, "cluster")
	file := filepath.Join(work, "cluster.yaml")
	if err := os.WriteFile(file, []byte(description(job, dir)), 0o600); err != nil {
		return run, err
	}
	run.start = time.Now()
	_, upErr := kubebootJSON(ctx, o, 10*time.Minute, "lab", "up", "--cluster", file, "--bin-dir", o.binDir, "-o", "json")
	run.end = time.Now()
	var probeErr error
	if upErr == nil && job == jobUsable {
		run.probed, probeErr = probeService(ctx, o, filepath.Join(dir, "kubeconfig"), "w1")
	}
	stagesErr := readStages(dir, &run, keep)
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
	if err := kubectl("run", "probe", "--image", agnhostImage, "--image-pull-policy", "Never", "--overrides", overrides, "--", "/agnhost", "pause"); err != nil {
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
