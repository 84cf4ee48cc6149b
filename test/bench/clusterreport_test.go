package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeRun is a run of job whose nodes reach each stage at the given
// offsets (seconds) from t0.
func fakeRun(t0 time.Time, job string, nodes map[string]map[string]float64) clusterRun {
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	r := clusterRun{job: job, start: t0, end: at(60), probed: at(62), nodes: map[string]nodeStages{}}
	for name, stages := range nodes {
		r.nodes[name] = nodeStages{}
		for stage, s := range stages {
			r.nodes[name][stage] = at(s)
		}
	}
	for i := range 240 {
		r.usage = append(r.usage, usage{at: at(float64(i) / 4), cpu: time.Duration(i) * 100 * time.Millisecond, rss: int64(i) << 20})
	}
	return r
}

// TestClusterReport: from stages, the tables show each tool's time, the
// ratios of the same round, the stages of a usable cluster, the scale
// series' window and control-plane CPU, and the HA join's stages.
func TestClusterReport(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	cp := func(healthy, done float64, kubeadm bool) map[string]float64 {
		m := map[string]float64{"runtime-started": 1, "images-ready": 10, "bootstrap-started": 10, "kubelet-started": 10.5, "manifests-seen": 10.7,
			"etcd-healthy": healthy - 4, "kube-apiserver-healthy": healthy, "kube-controller-manager-healthy": healthy - 5, "kube-scheduler-healthy": healthy - 1,
			"control-plane-healthy": healthy, "workflow-done": done}
		if kubeadm {
			m["kubeadm-exited"] = done - 0.1
		}
		return m
	}
	worker := func(start, ready float64) map[string]float64 {
		return map[string]float64{"runtime-started": 25, "images-ready": start, "bootstrap-started": start, "kubelet-started": start + 0.1, "workflow-done": ready}
	}
	r := &report{opts: options{clusterRuns: 2, clusterWarmup: 1}, clusters: clusterResults{}}
	for range 2 {
		r.clusters[jobKubebootInit] = append(r.clusters[jobKubebootInit], fakeRun(t0, jobKubebootInit, map[string]map[string]float64{"cp1": cp(18, 18.5, false)}))
		r.clusters[jobKubeadmInit] = append(r.clusters[jobKubeadmInit], fakeRun(t0, jobKubeadmInit, map[string]map[string]float64{"cp1": cp(19, 21, true)}))
		join := map[string]map[string]float64{"cp1": cp(18, 18.5, false), "w1": worker(30, 36)}
		join["w1"]["kubeadm-exited"] = 35.5
		r.clusters[jobKubeadmJoin] = append(r.clusters[jobKubeadmJoin], fakeRun(t0, jobKubeadmJoin, join))
		for _, n := range scaleSizes {
			nodes := map[string]map[string]float64{"cp1": cp(18, 18.5, false)}
			for i := range n {
				nodes[fmt.Sprintf("w%d", i+1)] = worker(30, 31+float64(n))
			}
			r.clusters[scaleJob(n)] = append(r.clusters[scaleJob(n)], fakeRun(t0, scaleJob(n), nodes))
		}
		ha := map[string]map[string]float64{"cp1": cp(18, 18.5, false)}
		for i, name := range []string{"cp2", "cp3"} {
			o := 20 * float64(i)
			ha[name] = map[string]float64{"bootstrap-started": 30 + o, "etcd-member-added": 31 + o, "etcd-member-started": 33 + o, "etcd-promoted": 34 + o, "control-plane-healthy": 40 + o, "workflow-done": 41 + o}
		}
		r.clusters[jobHA] = append(r.clusters[jobHA], fakeRun(t0, jobHA, ha))
	}
	var b strings.Builder
	r.clusterSection(&b)
	out := b.String()
	for _, want := range []string{
		// kubeadm's time ends when kubeadm exits, not when the lab's phase sees it.
		"| kubeboot init | 8.5 s / 8.5 s / 8.5 s | 8 s | 500 ms / 500 ms / 500 ms | 0.78× (0.78×–0.78×) |",
		"| kubeadm init | 10.9 s / 10.9 s / 10.9 s | 9 s | 1.9 s / 1.9 s / 1.9 s | 1.00× (1.00×–1.00×) |",
		// kubeboot's join is the scale series' N = 1: ready at 32 s.
		"| kubeboot init | 500 ms | 700 ms | 4 s | 8 s | 3 s | 7 s | 8 s |",
		"| kubeadm init | 500 ms | 700 ms | 5 s | 9 s | 4 s | 8 s | 9 s |",
		"| kubeboot join → Node Ready | 2 s | 2 s | 2 s |",
		"| kubeadm join → Node Ready | 6 s | 6 s | 6 s |",
		"| kubeadm join itself, to its return | 5.5 s | 5.5 s | 5.5 s |",
		"Ratio kubeboot / kubeadm: **0.33×**",
		// kubeboot's kubelet: started at 30.1 s, ready at 32 s; kubeadm's join 6 s.
		"its join would be the kubelet's part, **0.32×** of kubeadm's join",
		"| **command start → the pod reached the Service** | 62 s | 62 s | 62 s |",
		// 8 workers: 9 s window; CPU from the last sample before 30 s to the first after 39 s.
		"| 8 | 9 s (9 s–9 s) | 1.12 s | 3.6 s (3.6 s–3.6 s) | 450 ms | 156.0 MiB (156.0 MiB–156.0 MiB) |",
		"| learner added → its etcd member started and following the leader | 2 s (2 s–2 s) | 2 s (2 s–2 s) |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	targets := r.clusterTargets()
	if len(targets) != 2 || targets[0].met || !targets[1].met {
		t.Errorf("targets %+v: want init missed (0.78×) and join met (0.33×)", targets)
	}
}
