package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeRun is a run of job whose nodes reach each stage at the given
// offsets (seconds) from t0; kubeadm names the nodes kubeadm brought up.
func fakeRun(t0 time.Time, job string, nodes map[string]map[string]float64, kubeadm ...string) clusterRun {
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	r := clusterRun{job: job, start: t0, end: at(60), probed: at(62),
		labUp: labUp{installed: at(4), booted: at(6), nodes: map[string]nodeStages{}, kubeadm: kubeadm, failed: map[string]int{}}}
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

// fakePhases is the phases-alone group with kubeboot's ecdsa-p256
// certificates and kubeconfigs at 200 ms.
func fakePhases() *group {
	var jobs []*job
	for _, name := range []string{"kubeadm rsa", "kubeboot rsa", "kubeboot init phase certs + kubeconfig (ecdsa-p256, default)", "kubeadm ecdsa"} {
		jobs = append(jobs, &job{name: name, samples: []sample{{wall: 200 * time.Millisecond}}})
	}
	return &group{jobs: jobs, ref: jobs[0]}
}

// TestClusterReport: from stages, the tables show each tool's time, the
// ratios of the same round, the stages of a usable cluster, the scale
// series' window and control-plane CPU, the HA join's stages and the
// failed attempts.
func TestClusterReport(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	cp := func(healthy, done float64) map[string]float64 {
		return map[string]float64{stageStarted: 10, stageFirstEvent: 10.2, stageKubeletStart: 10.5, stageHealthy: healthy, stageDone: done, stageUp: done + 0.5}
	}
	kubeadmNode := func(start, done float64) map[string]float64 {
		return map[string]float64{stageStarted: start, stageDone: done, stageUp: done + 0.1}
	}
	worker := func(reached, ready float64) map[string]float64 {
		return map[string]float64{stageFirstEvent: 8, stageClusterReached: reached, stageKubeletStart: reached + 0.1, stageClientCert: reached + 1, stageNodeReady: ready, stageDone: ready + 0.1, stageUp: ready + 0.5}
	}
	r := &report{opts: options{clusterRuns: 2, clusterWarmup: 1}, clusters: clusterResults{}, commands: commandResults{phases: fakePhases()}}
	for range 2 {
		r.clusters[jobKubebootInit] = append(r.clusters[jobKubebootInit], fakeRun(t0, jobKubebootInit, map[string]map[string]float64{"cp1": cp(18, 18.5)}))
		r.clusters[jobKubeadmInit] = append(r.clusters[jobKubeadmInit], fakeRun(t0, jobKubeadmInit, map[string]map[string]float64{"cp1": kubeadmNode(10, 21)}, "cp1"))
		join := map[string]map[string]float64{"cp1": cp(18, 18.5), "w1": kubeadmNode(20, 24.5)}
		r.clusters[jobKubeadmJoin] = append(r.clusters[jobKubeadmJoin], fakeRun(t0, jobKubeadmJoin, join, "w1"))
		for _, n := range scaleSizes {
			nodes := map[string]map[string]float64{"cp1": cp(18, 18.5)}
			for i := range n {
				nodes[fmt.Sprintf("w%d", i+1)] = worker(30, 31+float64(n))
			}
			run := fakeRun(t0, scaleJob(n), nodes)
			if scaleJob(n) == jobUsable {
				run.floor = floor{leads: t0.Add(19500 * time.Millisecond), signs: t0.Add(20100 * time.Millisecond), coreDNS: 3 * time.Second}
				run.apply = applyRun{took: 300 * time.Millisecond, exec: 40 * time.Millisecond, events: 200 * time.Millisecond}
			}
			r.clusters[scaleJob(n)] = append(r.clusters[scaleJob(n)], run)
		}
		ha := map[string]map[string]float64{"cp1": cp(18, 18.5)}
		for i, name := range []string{"cp2", "cp3"} {
			o := 20 * float64(i)
			ha[name] = map[string]float64{stageClusterReached: 30 + o, stageEtcdAdded: 31 + o, stageEtcdStarted: 33 + o, stageEtcdPromoted: 34 + o, stageHealthy: 40 + o, stageDone: 41 + o}
		}
		run := fakeRun(t0, jobHA, ha)
		run.failed["cp3"] = 1
		r.clusters[jobHA] = append(r.clusters[jobHA], run)
	}
	var b strings.Builder
	r.clusterSection(&b)
	out := b.String()
	for _, want := range []string{
		// kubeboot: 10 s → 18.5 s; kubeadm: 10 s → 21 s.
		"| kubeboot init | 8.5 s / 8.5 s / 8.5 s | 0.77× (0.77×–0.77×) |",
		"| kubeadm init | 11 s / 11 s / 11 s | 1.00× (1.00×–1.00×) |",
		// 8.5 s + 200 ms of certificates over 11 s.
		"is handed its CA in its file (`certificates.ca`",
		"| of which unit start → preflight passed | 200 ms | 200 ms | 200 ms |",
		"| kubelet restarted → all four components healthy (the kubelet, containerd and the components' own start) | 7.5 s | 7.5 s | 7.5 s |",
		"its init would be that wait, **0.68×** of kubeadm's init",
		// kubeboot's join is the scale series' N = 1: discovered at 30 s,
		// client certificate at 31 s; kubeadm's 20 s → 24.5 s.
		"| kubeboot join: cluster discovered → the kubelet's client certificate | 1 s | 1 s | 1 s |",
		"| kubeadm join: start → return | 4.5 s | 4.5 s | 4.5 s |",
		"| kubeboot: cluster discovered → Node Ready | 2 s | 2 s | 2 s |",
		"Ratio kubeboot / kubeadm: **0.22×**",
		"its join would be the kubelet's part, **0.20×** of kubeadm's join",
		// cp1's unit started at 10 s, its kubelet restarted at 10.5 s,
		// healthy at 18 s, init returned at 18.5 s; kubeadm init took 11 s.
		"| kubeboot's own: unit start → kubelet restarted, and healthy → init returned | 1 s | 1 s | 1 s |",
		"kubeboot's own time is **0.09×** of kubeadm's init.",
		"| **command start → the pod reached the Service** | 62 s | 62 s | 62 s |",
		// Installed at 4 s, booted at 6 s, cp1's unit started at 10 s.
		"| the machines' boot, all at once (installed → booted) | 2 s | 2 s | 2 s |",
		"| cp1's containerd (booted → cp1's bootstrap unit started) | 4 s | 4 s | 4 s |",
		// The workers discovered the cluster at 30 s and the later was
		// Ready at 33 s; cp1's init returned at 18.5 s.
		"| workers: init's return → the later worker's discovery (cluster-info, signed by init, read every 0.5 s once the API server answers) | 11.5 s | 11.5 s | 11.5 s |",
		// Discovered at 30 s, client certificate at 31 s, Ready at 33 s.
		"| workers: discovery → the kubelet's client certificate, the later worker (its CSR approved and signed by the controller-manager, once it leads and started its controllers) | 1 s | 1 s | 1 s |",
		"| workers: the client certificate → Node Ready, the later worker (registration, the node's pod network) | 2 s | 2 s | 2 s |",
		"| workers: init's return → the later worker's Node Ready | 14.5 s | 14.5 s | 14.5 s |",
		// The last node up at 33.5 s, lab up returned at 60 s.
		"| pod routes, the addons and the StorageClass rolled out (the last node up → `lab up` returned) | 26.5 s | 26.5 s | 26.5 s |",
		"Before the nodes' containerd stores were preloaded and the machines booted at once, it took 56.3 s",
		"Target: ≤ 25 s median; measured 62 s median (62 s – 62 s): **missed**.",
		// cp1's kubelet restarted at 10.5 s, healthy at 18 s; the
		// controller-manager led at 19.5 s, 9 s after the restart.
		"| the kubelet restarted → etcd, the API server, the controller-manager and the scheduler healthy (their start on 2 cores; within init) | 7.5 s | 7.5 s | 7.5 s |",
		"| the kubelet restarted → the controller-manager leads (the API server's start, then the lease acquired: before it, no CSR is signed and no DaemonSet or Deployment has pods) | 9 s | 9 s | 9 s |",
		"| the controller-manager leads → it starts the signer of the kubelets' client certificates (it builds every controller first, each one's service account made through its own client, at kubeboot's `--kube-api-qps` and `--kube-api-burst`) | 600 ms | 600 ms | 600 ms |",
		"| a CoreDNS pod scheduled → Ready, the later of the two (its sandbox, start and first good readiness probe; conditions stamped to the second) | 3 s | 3 s | 3 s |",
		// upgrade apply took 300 ms through lab exec, version 40 ms.
		"| **upgrade apply's own** (the two's difference) | 260 ms | 260 ms | 260 ms |",
		// 8 workers: 9 s window; CPU from the last sample before 30 s to the first after 39 s.
		"| 8 | 9 s (9 s–9 s) | 1.12 s | 3.6 s (3.6 s–3.6 s) | 450 ms | 156.0 MiB (156.0 MiB–156.0 MiB) |",
		"| learner added → its etcd member started and following the leader | 2 s (2 s–2 s) | 2 s (2 s–2 s) |",
		"| **whole join**, from the cluster secrets fetched | 11 s (11 s–11 s) | 11 s (11 s–11 s) |",
		"in the timed rounds (the times above include them): three control planes 2.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	targets := r.clusterTargets()
	if len(targets) != 5 || targets[0].met || !targets[1].met || targets[1].measured != "0.09× (1 s vs 11 s)" || !targets[2].met || targets[3].met || targets[3].measured != "62 s median (62 s – 62 s)" ||
		targets[4].met || targets[4].measured != "260 ms median (300 ms less 40 ms), 0 files written in each of 10 runs" {
		t.Errorf("targets %+v: want init missed (0.77×), its own time met (0.09×), join met (0.22×), the usable cluster missed (62 s) and upgrade apply missed (260 ms)", targets)
	}
}

// TestScheduledToReady: the floor's CoreDNS time is the later pod's, from
// its PodScheduled condition to its Ready one; a pod short of either is
// an error, as is no pod.
func TestScheduledToReady(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	pod := func(name string, scheduled, ready int, readyStatus corev1.ConditionStatus) corev1.Pod {
		at := func(s int) metav1.Time { return metav1.NewTime(t0.Add(time.Duration(s) * time.Second)) }
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: at(scheduled)},
			{Type: corev1.PodReady, Status: readyStatus, LastTransitionTime: at(ready)},
		}}}
	}
	got, err := scheduledToReady([]corev1.Pod{pod("a", 10, 12, corev1.ConditionTrue), pod("b", 10, 15, corev1.ConditionTrue)})
	if err != nil || got != 5*time.Second {
		t.Errorf("two Ready pods: %v, %v; want 5s", got, err)
	}
	if _, err := scheduledToReady([]corev1.Pod{pod("a", 10, 12, corev1.ConditionTrue), pod("b", 10, 15, corev1.ConditionFalse)}); err == nil || !strings.Contains(err.Error(), "pod b") {
		t.Errorf("a pod not Ready: %v", err)
	}
	if _, err := scheduledToReady(nil); err == nil {
		t.Error("no pod: no error")
	}
}

// TestFmtSeconds: three significant digits in the unit that fits, and a
// negative span (stages that came in the other order) keeps its sign.
func TestFmtSeconds(t *testing.T) {
	for s, want := range map[float64]string{1.5: "1.5 s", 0.0425: "42.5 ms", 0.0000123: "12.3 µs", -0.243: "-243 ms", -2: "-2 s"} {
		if got := fmtSeconds(s); got != want {
			t.Errorf("fmtSeconds(%v) = %q, want %q", s, got, want)
		}
	}
}

// TestUnchangedApply: upgrade apply's output gives the span from its
// first event to its last; a run that wrote a file, or printed no result,
// is an error.
func TestUnchangedApply(t *testing.T) {
	events := `{"level":"info","msg":"every manifest is up to date","phase":"upgrade","time":"2026-12-01T00:29:27.959Z"}
{"level":"info","msg":"the kubelet runs v1.36.3","phase":"upgrade","time":"2026-12-01T00:29:28.169Z"}
`
	span, err := unchangedApply([]byte(events + `{"result":{"ok":true,"written":[],"unchanged":["/etc/kubernetes/admin.conf"]}}` + "\n"))
	if err != nil || span != 210*time.Millisecond {
		t.Errorf("an unchanged run: %s, %v; want 210ms", span, err)
	}
	for out, want := range map[string]string{
		events + `{"result":{"ok":true,"written":["/etc/kubernetes/manifests/etcd.yaml"]}}`: "wrote 1 files",
		events: "no result",
	} {
		if _, err := unchangedApply([]byte(out)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("unchangedApply: %v; want an error saying %q", err, want)
		}
	}
}

// TestSignerStarted: the signer's start is read from the line that says
// so, by the runtime's timestamp; a log without it is an error.
func TestSignerStarted(t *testing.T) {
	logs := "2026-12-02T03:20:15.129995074Z I1202 03:20:15.129655 1 leaderelection.go:272] \"Successfully acquired lease\"\n" +
		"2026-12-02T03:20:20.479492377Z I1202 03:20:20.470725 1 certificate_controller.go:120] \"Starting certificate controller\" name=\"csrsigning-kubelet-serving\"\n" +
		"2026-12-02T03:20:20.479810359Z I1202 03:20:20.470760 1 certificate_controller.go:120] \"Starting certificate controller\" name=\"csrsigning-kubelet-client\"\n"
	got, err := signerStarted([]byte(logs))
	if want := time.Date(2026, 12, 2, 3, 20, 20, 479810359, time.UTC); err != nil || !got.Equal(want) {
		t.Errorf("signerStarted: %v, %v; want %v", got, err, want)
	}
	if _, err := signerStarted([]byte(logs[:strings.LastIndex(logs[:len(logs)-1], "\n")+1])); err == nil || !strings.Contains(err.Error(), "csrsigning-kubelet-client") {
		t.Errorf("a log without the line: %v; want an error naming it", err)
	}
}
