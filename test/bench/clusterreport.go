package main

import (
	"fmt"
	"strings"
	"time"
)

// Targets of the cluster benchmark issue: kubeboot's time over kubeadm's.
const (
	targetInitRatio = 0.5
	targetJoinRatio = 0.5
)

// clusterRow is one row of a cluster table: a span of each run.
type clusterRow struct {
	name string
	f    func(clusterRun) time.Duration
}

// spanOf is a row's function for a span between two nodes' stages (zero
// when a stage is missing, which the tables show as such).
func spanOf(na, a, nb, b string) func(clusterRun) time.Duration {
	return func(r clusterRun) time.Duration {
		d, _ := r.span(na, a, nb, b)
		return d
	}
}

// initWall is from cp1's bootstrap-started to its init's return.
func initWall(r clusterRun) time.Duration {
	return spanOf("cp1", "bootstrap-started", "cp1", r.toolEnd("cp1"))(r)
}

// afterHealthy is from the control plane's healthy moment to the tool's return.
func afterHealthy(r clusterRun) time.Duration {
	return spanOf("cp1", "control-plane-healthy", "cp1", r.toolEnd("cp1"))(r)
}

func durations(runs []clusterRun, f func(clusterRun) time.Duration) summary {
	xs := make([]float64, len(runs))
	for i, r := range runs {
		xs[i] = f(r).Seconds()
	}
	return summarize(xs)
}

// pairRatios are the per-round ratios of fa over fb: a and b ran in the
// same round.
func pairRatios(a, b []clusterRun, fa, fb func(clusterRun) time.Duration) summary {
	n := min(len(a), len(b))
	xs := make([]float64, n)
	for i := range n {
		xs[i] = fa(a[i]).Seconds() / fb(b[i]).Seconds()
	}
	return summarize(xs)
}

func writeRows(b *strings.Builder, runs []clusterRun, rows []clusterRow) {
	b.WriteString("| | min | median | max |\n|---|---|---|---|\n")
	for _, row := range rows {
		s := durations(runs, row.f)
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", row.name, fmtSeconds(s.min), fmtSeconds(s.median), fmtSeconds(s.max))
	}
	b.WriteString("\n")
}

// joinWall is a worker's join, kubeboot's or kubeadm's: from its
// bootstrap-started to its Node Ready (both tools' workflow-done).
var joinWall = spanOf("w1", "bootstrap-started", "w1", "workflow-done")

// clusterTargets are the targets table's rows for bring-up and join.
func (r *report) clusterTargets() []target {
	kb, ka := r.clusters[jobKubebootInit], r.clusters[jobKubeadmInit]
	kbJoins, kaJoins := r.clusters[scaleJob(1)], r.clusters[jobKubeadmJoin]
	initRatio := durations(kb, initWall).median / durations(ka, initWall).median
	joinRatio := durations(kbJoins, joinWall).median / durations(kaJoins, joinWall).median
	return []target{
		{"control-plane bring-up: `kubeboot init` vs `kubeadm init`, empty node to the command's return", fmt.Sprintf("≤ %.2f×", targetInitRatio),
			fmt.Sprintf("%s (%s vs %s)", fmtRatio(initRatio), fmtSeconds(durations(kb, initWall).median), fmtSeconds(durations(ka, initWall).median)), initRatio <= targetInitRatio},
		{"worker join: `kubeboot join` vs `kubeadm join`, command start to Node Ready", fmt.Sprintf("≤ %.2f×", targetJoinRatio),
			fmt.Sprintf("%s (%s vs %s)", fmtRatio(joinRatio), fmtSeconds(durations(kbJoins, joinWall).median),
				fmtSeconds(durations(kaJoins, joinWall).median)), joinRatio <= targetJoinRatio},
	}
}

// clusterSection writes the bring-up, join and usable-cluster tables.
func (r *report) clusterSection(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	kb, ka := r.clusters[jobKubebootInit], r.clusters[jobKubeadmInit]
	w("## Clusters on containerd: bring-up and join side by side with kubeadm\n\n")
	w("Every job below is one `kubeboot lab up --cluster` of a fresh lab (nodes in network namespaces of their own on %s, ", clusterSubnet)
	w("each node with its own containerd %s and runc and the real kubelet %s), then `lab down --cluster`. ", r.versions.containerd, r.versions.kubeadm)
	w("The jobs run in a rotating order, round by round (%d timed rounds after %d warm-up round); ratios come from the same round. ", r.opts.clusterRuns, r.opts.clusterWarmup)
	w("The times come from the stages each node's `lab up -o json` marks (`<node>/lab-up.json`; the last round's are in `.cache/bench/timelines/`): ")
	w("`bootstrap-started` (the node's images are in containerd and the tool starts), `kubelet-started`, `manifests-seen`, `<component>-healthy` and `control-plane-healthy` ")
	w("(lab up's own watch: it polls the four components every 20 ms, the same way whichever tool wrote the manifests), `kubeadm-exited` and `workflow-done`.\n\n")
	w("**How the kubelet starts, for both tools.** There is no systemd on the lab's nodes, so `lab up` starts the kubelet itself, as the systemd unit would: ")
	w("for kubeboot, right after kubeboot's kubelet-config phase wrote what the kubelet reads (kubeboot skips its own kubelet-start); ")
	w("for kubeadm, as soon as kubeadm's kubelet-start wrote `/var/lib/kubelet/config.yaml`, `kubeadm-flags.env` and a kubeconfig (looked for every 10 ms), ")
	w("with the flags of kubeadm's systemd drop-in. kubeadm runs in the node's own mount namespace, where /etc and /var/lib are overlays into the node's dir, ")
	w("and the node's /etc/hosts names the node, as on a real machine. kubeadm uses ECDSA-P256 keys, as kubeboot does by default, so that neither pays for RSA keys; ")
	w("it skips its addon/kube-proxy phase (its DaemonSet would mount the host's /run/xtables.lock), kubeboot does not.\n\n")

	bringUps := []struct {
		name string
		runs []clusterRun
	}{{"kubeboot init", kb}, {"kubeadm init", ka}}
	w("### Control-plane bring-up\n\n")
	w("One control-plane node, from `bootstrap-started` to the tool's return. \"To healthy\" ends when all four components answer; \"after healthy\" is what the tool took after that before it returned ")
	w("(kubeadm checks every 500 ms; it then uploads its configuration, marks the node, and creates the bootstrap token, cluster-info and CoreDNS, as kubeboot does with its addons and CSR approver).\n\n")
	w("| tool | wall min / median / max | to healthy (median) | after healthy min / median / max | ratio to kubeadm (range by round) |\n|---|---|---|---|---|\n")
	for _, t := range bringUps {
		wall, healthy, after := durations(t.runs, initWall), durations(t.runs, spanOf("cp1", "bootstrap-started", "cp1", "control-plane-healthy")), durations(t.runs, afterHealthy)
		ratio := pairRatios(t.runs, ka, initWall, initWall)
		w("| %s | %s / %s / %s | %s | %s / %s / %s | %s (%s–%s) |\n", t.name, fmtSeconds(wall.min), fmtSeconds(wall.median), fmtSeconds(wall.max),
			fmtSeconds(healthy.median), fmtSeconds(after.min), fmtSeconds(after.median), fmtSeconds(after.max),
			fmtRatio(wall.median/durations(ka, initWall).median), fmtRatio(ratio.min), fmtRatio(ratio.max))
	}
	components := func(c clusterRun) time.Duration {
		return spanOf("cp1", "kubelet-started", "cp1", "control-plane-healthy")(c)
	}
	own := func(c clusterRun) time.Duration { return initWall(c) - components(c) }
	kaWall := durations(ka, initWall).median
	w("\nBoth tools wait for the same thing: the kubelet starting the four static pods and the components' own start-up, from the kubelet's start to all four healthy, ")
	w("%s for kubeboot and %s for kubeadm (medians). Even if kubeboot took no time of its own, its wall time would be that wait, **%s** of kubeadm's, ", fmtSeconds(durations(kb, components).median), fmtSeconds(durations(ka, components).median), fmtRatio(durations(kb, components).median/kaWall))
	w("so the 0.5× target cannot be met by the bootstrapper here. What each tool adds to that wait (its wall time minus the wait): kubeboot %s, kubeadm %s, **%s**.\n",
		fmtSeconds(durations(kb, own).median), fmtSeconds(durations(ka, own).median), fmtRatio(durations(kb, own).median/durations(ka, own).median))
	w("\nWhere kubeboot's time goes (medians):\n\n")
	writeRows(b, kb, []clusterRow{
		{"certificates, kubeconfigs and the kubelet's config, before the kubelet starts", spanOf("cp1", "bootstrap-started", "cp1", "kubelet-started")},
		{"kubelet started → all four components healthy (manifests written ~0.1 s in; the rest is the kubelet, containerd and the components' own start)", spanOf("cp1", "kubelet-started", "cp1", "control-plane-healthy")},
		{"healthy → init returned (bootstrap-admin, upload-config, tokens, kubelet-finalize, CSR approver, addons)", afterHealthy},
	})
	w("And kubeadm's:\n\n")
	writeRows(b, ka, []clusterRow{
		{"preflight, certificates, kubeconfigs, manifests and the kubelet's files, before the kubelet starts", spanOf("cp1", "bootstrap-started", "cp1", "kubelet-started")},
		{"kubelet started → all four components healthy", spanOf("cp1", "kubelet-started", "cp1", "control-plane-healthy")},
		{"healthy → kubeadm init returned", afterHealthy},
	})
	w("Inside the wait, when lab up's watch saw each component answer first, from the tool's start (medians). ")
	w("The watch starts with the kubelet; kubeadm writes its manifests before it has the kubelet started, so for kubeadm \"manifests seen\" is the kubelet's start.\n\n")
	w("| tool | kubelet started | manifests seen | etcd | kube-apiserver | kube-controller-manager | kube-scheduler | all four |\n|---|---|---|---|---|---|---|---|\n")
	for _, t := range bringUps {
		w("| %s |", t.name)
		for _, stage := range []string{"kubelet-started", "manifests-seen", "etcd-healthy", "kube-apiserver-healthy", "kube-controller-manager-healthy", "kube-scheduler-healthy", "control-plane-healthy"} {
			w(" %s |", fmtSeconds(durations(t.runs, spanOf("cp1", "bootstrap-started", "cp1", stage)).median))
		}
		w("\n")
	}
	w("\n")

	kbJoins, kaJoins := r.clusters[scaleJob(1)], r.clusters[jobKubeadmJoin]
	w("### Worker join\n\n")
	w("One control plane (kubeboot) and one worker, `w1`, in two jobs of the same round: `w1` joins with `kubeboot join` in one (the scale series' N = 1 below) ")
	w("and with the real `kubeadm join` (the discovery file of `kubeboot token create`) in the other, so that each joins alone, on the same address, against the same control plane. ")
	w("From the worker's `bootstrap-started` to its Node Ready (both watch the Node).\n\n")
	kubeletUp := spanOf("w1", "kubelet-started", "w1", "workflow-done")
	ratio := pairRatios(kbJoins, kaJoins, joinWall, joinWall)
	w("| | min | median | max |\n|---|---|---|---|\n")
	for _, row := range []struct {
		name string
		runs []clusterRun
		f    func(clusterRun) time.Duration
	}{
		{"kubeboot join → Node Ready", kbJoins, joinWall},
		{"kubeadm join → Node Ready", kaJoins, joinWall},
		{"kubeboot: discovery, TLS bootstrap config and kubelet config, before the kubelet starts", kbJoins, spanOf("w1", "bootstrap-started", "w1", "kubelet-started")},
		{"kubeadm: preflight, discovery and the kubelet's files, before the kubelet starts", kaJoins, spanOf("w1", "bootstrap-started", "w1", "kubelet-started")},
		{"kubeadm join itself, to its return", kaJoins, spanOf("w1", "bootstrap-started", "w1", "kubeadm-exited")},
	} {
		s := durations(row.runs, row.f)
		w("| %s | %s | %s | %s |\n", row.name, fmtSeconds(s.min), fmtSeconds(s.median), fmtSeconds(s.max))
	}
	w("\nRatio kubeboot / kubeadm: **%s** (range by round %s–%s).\n\n", fmtRatio(durations(kbJoins, joinWall).median/durations(kaJoins, joinWall).median), fmtRatio(ratio.min), fmtRatio(ratio.max))
	w("From the kubelet's start to the Node Ready, the kubelet's own start-up, TLS bootstrap and registration, takes %s after kubeboot and %s after kubeadm (medians); ",
		fmtSeconds(durations(kbJoins, kubeletUp).median), fmtSeconds(durations(kaJoins, kubeletUp).median))
	w("what each tool adds before and around it: kubeboot %s, kubeadm %s. ",
		fmtSeconds(durations(kbJoins, func(c clusterRun) time.Duration { return joinWall(c) - kubeletUp(c) }).median),
		fmtSeconds(durations(kaJoins, func(c clusterRun) time.Duration { return joinWall(c) - kubeletUp(c) }).median))
	w("Even if kubeboot took no time of its own, its join would be the kubelet's part, **%s** of kubeadm's join.\n\n",
		fmtRatio(durations(kbJoins, kubeletUp).median/durations(kaJoins, joinWall).median))

	usable := r.clusters[jobUsable]
	w("### A usable cluster\n\n")
	w("`kubeboot lab up --cluster` of one control plane and two kubeboot workers, from the command's start until a pod on w1 (started right after `lab up` returned, agnhost) ")
	w("resolves `kubernetes.default.svc.cluster.local` through CoreDNS and connects to its ClusterIP through kube-proxy (`agnhost connect`, retried every 100 ms).\n\n")
	lastWorker := func(stage string) func(clusterRun) time.Duration {
		return func(r clusterRun) time.Duration {
			var last time.Duration
			for _, n := range []string{"w1", "w2"} {
				last = max(last, spanOf("cp1", "workflow-done", n, stage)(r))
			}
			return last
		}
	}
	writeRows(b, usable, []clusterRow{
		{"**command start → the pod reached the Service**", func(r clusterRun) time.Duration { return r.probed.Sub(r.start) }},
		{"`lab up --cluster` alone", func(r clusterRun) time.Duration { return r.end.Sub(r.start) }},
		{"network, load balancer, cp1's containerd start", func(r clusterRun) time.Duration { return r.nodes["cp1"]["runtime-started"].Sub(r.start) }},
		{"cp1's images into containerd", spanOf("cp1", "runtime-started", "cp1", "images-ready")},
		{"init (kubeboot init, to its return)", initWall},
		{"of which kubeboot's own (before the kubelet starts, and after healthy)", func(r clusterRun) time.Duration {
			return spanOf("cp1", "bootstrap-started", "cp1", "kubelet-started")(r) + afterHealthy(r)
		}},
		{"workers, at once: token, containerd and images (init's return → the later worker's images ready)", lastWorker("images-ready")},
		{"workers: join to Ready (init's return → the later worker Ready)", lastWorker("workflow-done")},
		{"pod routes and addons rolled out (the later worker Ready → `lab up` returned)", func(r clusterRun) time.Duration {
			return r.end.Sub(r.nodes["cp1"]["workflow-done"].Add(lastWorker("workflow-done")(r)))
		}},
		{"probe pod scheduled and Ready, then the Service reached", func(r clusterRun) time.Duration { return r.probed.Sub(r.end) }},
	})
	r.scaleSection(b)
	r.haSection(b)
}

// scaleSection writes the scale series: N workers joining at once.
func (r *report) scaleSection(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("### Scale: workers joining at once\n\n")
	w("One control plane and N kubeboot workers that `lab up --cluster` joins all at once (N = 2 is the usable cluster above). ")
	w("The join window runs from the first worker's `bootstrap-started` to the last worker's Ready; it holds each worker's containerd start and image import too, ")
	w("all on the same 2 cores. The control plane's CPU is the user + system time of its etcd, kube-apiserver, kube-controller-manager and kube-scheduler ")
	w("processes over the window (sampled from /proc every 250 ms), and its memory their summed RSS at its peak in the window. Medians, with the range:\n\n")
	w("| workers | join window | per worker | control-plane CPU | control-plane CPU per worker | peak control-plane RSS |\n|---|---|---|---|---|---|\n")
	for _, n := range scaleSizes {
		runs := r.clusters[scaleJob(n)]
		win := func(c clusterRun) time.Duration { from, to := c.joinWindow(); return to.Sub(from) }
		cpu := func(c clusterRun) time.Duration {
			from, to := c.joinWindow()
			d, _ := window(c.usage, from, to)
			return d
		}
		rss := make([]float64, len(runs))
		for i, c := range runs {
			from, to := c.joinWindow()
			_, peak := window(c.usage, from, to)
			rss[i] = float64(peak)
		}
		ws, cs, rs := durations(runs, win), durations(runs, cpu), summarize(rss)
		w("| %d | %s (%s–%s) | %s | %s (%s–%s) | %s | %s (%s–%s) |\n", n, fmtSeconds(ws.median), fmtSeconds(ws.min), fmtSeconds(ws.max),
			fmtSeconds(ws.median/float64(n)), fmtSeconds(cs.median), fmtSeconds(cs.min), fmtSeconds(cs.max), fmtSeconds(cs.median/float64(n)),
			fmtBytes(rs.median), fmtBytes(rs.min), fmtBytes(rs.max))
	}
	w("\n")
}

// haSection writes the stages of the second and third control-plane
// nodes' joins.
func (r *report) haSection(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	runs := r.clusters[jobHA]
	w("### HA: the second and third control-plane nodes\n\n")
	w("Three control-plane nodes behind the lab's load balancer: cp1 inits, then cp2 and cp3 join one after the other with `kubeboot join --control-plane` ")
	w("and cp1's certificate bundle. Each stage runs from the end of the one before, on the joining node (medians, with the range):\n\n")
	w("| stage | cp2 | cp3 |\n|---|---|---|\n")
	stages := []struct{ name, from, to string }{
		{"certificates, kubeconfigs and kubelet start (before the etcd member is added)", "bootstrap-started", "etcd-member-added"},
		{"learner added → its etcd member started and following the leader", "etcd-member-added", "etcd-member-started"},
		{"caught up and promoted to a voter (etcd refuses the promotion until the learner is in sync)", "etcd-member-started", "etcd-promoted"},
		{"promoted → the node's four components healthy", "etcd-promoted", "control-plane-healthy"},
		{"healthy → join returned", "control-plane-healthy", "workflow-done"},
		{"**whole join**", "bootstrap-started", "workflow-done"},
	}
	for _, st := range stages {
		w("| %s |", st.name)
		for _, node := range []string{"cp2", "cp3"} {
			s := durations(runs, spanOf(node, st.from, node, st.to))
			w(" %s (%s–%s) |", fmtSeconds(s.median), fmtSeconds(s.min), fmtSeconds(s.max))
		}
		w("\n")
	}
	w("\n")
}
