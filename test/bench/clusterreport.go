package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Targets of the cluster benchmark issue: kubeboot's time over kubeadm's.
const (
	targetInitRatio = 0.5
	// targetOwnRatio bounds kubeboot init's own time (initOwn) over
	// kubeadm init's whole.
	targetOwnRatio  = 0.15
	targetJoinRatio = 0.5
	// targetUsable bounds a usable cluster's median.
	targetUsable = 25 * time.Second
)

// clusterRow is one row of a cluster table: a span of each run.
type clusterRow struct {
	name string
	f    func(clusterRun) time.Duration
}

// spanOf is a row's function for a span between two nodes' stages.
func spanOf(na, a, nb, b string) func(clusterRun) time.Duration {
	return func(r clusterRun) time.Duration { return r.span(na, a, nb, b) }
}

// initWall is from cp1's tool's start (the bootstrap unit's, or
// kubeadm's) to its return.
var initWall = spanOf(firstNode, stageStarted, firstNode, stageDone)

// afterHealthy is from kubeboot's control plane healthy to init's return.
var afterHealthy = spanOf(firstNode, stageHealthy, firstNode, stageDone)

// initOwn is kubeboot init's own time on cp1: from its start to the
// kubelet's restart, and from its control plane healthy to its return.
// Between them are the kubelet's and the components' start, which kubeadm
// init waits for too.
func initOwn(r clusterRun) time.Duration {
	return r.span(firstNode, stageStarted, firstNode, stageKubeletStart) + afterHealthy(r)
}

// joinWall is a worker's join to its kubelet's client certificate, where
// `kubeadm join` returns: kubeboot's from discovering the cluster,
// kubeadm's from its start.
func joinWall(r clusterRun) time.Duration {
	if slices.Contains(r.kubeadm, "w1") {
		return spanOf("w1", stageStarted, "w1", stageDone)(r)
	}
	return spanOf("w1", stageClusterReached, "w1", stageClientCert)(r)
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

// clusterTargets are the targets table's rows for bring-up and join.
func (r *report) clusterTargets() []target {
	kb, ka := r.clusters[jobKubebootInit], r.clusters[jobKubeadmInit]
	kbJoins, kaJoins := r.clusters[scaleJob(1)], r.clusters[jobKubeadmJoin]
	initRatio := durations(kb, initWall).median / durations(ka, initWall).median
	ownRatio := durations(kb, initOwn).median / durations(ka, initWall).median
	joinRatio := durations(kbJoins, joinWall).median / durations(kaJoins, joinWall).median
	return []target{
		{"control-plane bring-up: `kubeboot init` vs `kubeadm init` on a machine, the tool's start to its return", fmt.Sprintf("≤ %.2f×", targetInitRatio),
			fmt.Sprintf("%s (%s vs %s)", fmtRatio(initRatio), fmtSeconds(durations(kb, initWall).median), fmtSeconds(durations(ka, initWall).median)), initRatio <= targetInitRatio},
		{"kubeboot init's own time on that machine (its start → the kubelet restarted, and the control plane healthy → its return) vs `kubeadm init`", fmt.Sprintf("≤ %.2f×", targetOwnRatio),
			fmt.Sprintf("%s (%s vs %s)", fmtRatio(ownRatio), fmtSeconds(durations(kb, initOwn).median), fmtSeconds(durations(ka, initWall).median)), ownRatio <= targetOwnRatio},
		{"worker join: `kubeboot join` vs `kubeadm join` on a machine, to the kubelet's client certificate (where kubeadm join returns)", fmt.Sprintf("≤ %.2f×", targetJoinRatio),
			fmt.Sprintf("%s (%s vs %s)", fmtRatio(joinRatio), fmtSeconds(durations(kbJoins, joinWall).median),
				fmtSeconds(durations(kaJoins, joinWall).median)), joinRatio <= targetJoinRatio},
		usableTarget(r.clusters[jobUsable]),
		applyTarget(r.clusters[jobUsable]),
	}
}

// applyTarget is the targets table's row of upgrade apply with nothing to
// change.
func applyTarget(runs []clusterRun) target {
	own := durations(runs, func(r clusterRun) time.Duration { return r.apply.own() }).median
	return target{"`kubeboot upgrade apply` with nothing to change, on cp1 of the usable cluster: its own time (through `lab exec`, less `kubeboot version`'s)",
		"≤ " + fmtSeconds(targetApply) + ", 0 files written",
		fmt.Sprintf("%s median (%s less %s), 0 files written in each of %d runs", fmtSeconds(own),
			fmtSeconds(durations(runs, func(r clusterRun) time.Duration { return r.apply.took }).median),
			fmtSeconds(durations(runs, func(r clusterRun) time.Duration { return r.apply.exec }).median), applyRounds*len(runs)),
		own <= targetApply}
}

// usableTarget is the targets table's row of the usable cluster.
func usableTarget(runs []clusterRun) target {
	s := durations(runs, usableWall)
	return target{"usable 3-node cluster: `lab up --cluster` of a control plane and two workers, its start → a pod's DNS answer and connection through a Service",
		"≤ " + fmtSeconds(targetUsable.Seconds()) + " median",
		fmt.Sprintf("%s median (%s – %s)", fmtSeconds(s.median), fmtSeconds(s.min), fmtSeconds(s.max)), s.median <= targetUsable.Seconds()}
}

// clusterSection writes the bring-up, join, usable-cluster, scale and HA
// tables.
func (r *report) clusterSection(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("%s\n\n", clusterHeading)
	w("Every job below is one `kubeboot lab up --cluster` of a fresh lab of machines, then `lab down --cluster`. ")
	w("Each node is a machine of its own (systemd-nspawn, systemd as PID 1) in a network namespace of its own on %s, ", clusterSubnet)
	w("with containerd %s and the real kubelet %s as its systemd services, installed as the distributions' packages install them. ", r.versions.containerd, r.versions.kubeadm)
	w("All nodes boot at once. A kubeboot node brings itself up from its one file through `kubeboot-bootstrap.service` (`kubeboot bootstrap`: init, or join, retried every 10 s until it converges); ")
	w("a joining node's discovery waits for the first node meanwhile. A kubeadm node is brought up by the lab, which runs the real kubeadm in it as an operator would: ")
	w("`kubeadm init` once its containerd holds the lab's images, `kubeadm join` once cp1 is up. ")
	w("The jobs run in a rotating order, round by round (%d timed rounds after %d warm-up round); ratios come from the same round.\n\n", r.opts.clusterRuns, r.opts.clusterWarmup)
	w("**Where the times come from.** `lab up -o json` prints the lab's own events (machines installed, booted, each node up), ")
	w("each kubeboot node's own `-o json` events, followed from its bootstrap unit's journal as they come, and for a kubeadm node the lab's events just before kubeadm starts and once it has returned; ")
	w("each is stamped by the host as it prints it, a few milliseconds after the node did. Every round's streams are in `.cache/bench/timelines/` (`<job>-round<N>.jsonl`). ")
	w("A node's stages are read from them: kubelet-start's end (kubelet.service restarted with the tool's drop-in), the wait phase's event that saw the last of the four components healthy, ")
	w("a worker's discovery of the cluster, its kubelet holding its client certificate and its Node Ready, a joining control-plane node's etcd steps, and the tool's last event. ")
	w("cp1's bootstrap unit's start is its systemd's (`ExecMainStartTimestampMonotonic`, read with `lab exec` after `lab up`). ")
	w("kubeadm prints no events, so of a kubeadm node only its start and return are measured; when each component came up is not measured for either tool.\n\n")
	w("**How the kubelet starts, for both tools**: as on a real node. `kubelet.service` comes with the packages (with kubeadm's drop-in); ")
	w("kubeboot's kubelet-start writes its own drop-in and restarts the unit through the machine's systemd, kubeadm's writes `kubeadm-flags.env` and does the same. ")
	w("kubeadm is given the same cluster in its own configuration: ECDSA-P256 keys, as kubeboot's default, so that neither pays for RSA keys; the machines' kubelet settings; kube-proxy in nftables mode; ")
	w("its preflight errors that this host's machines raise ignored (SystemVerification, Swap, the bridge's netfilter setting).\n\n")
	r.bringUpSection(b)
	r.joinSection(b)
	r.usableSection(b)
	r.scaleSection(b)
	r.haSection(b)
	r.retriesSection(b)
}

// bringUpSection writes kubeboot init beside kubeadm init on one machine.
func (r *report) bringUpSection(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	kb, ka := r.clusters[jobKubebootInit], r.clusters[jobKubeadmInit]
	w("### Control-plane bring-up\n\n")
	w("One control-plane machine, from the tool's start (the bootstrap unit's; kubeadm's) to its return. ")
	w("Both return once the control plane is healthy and its objects are made: kubeboot after its addons, kubeadm after its own (CoreDNS and kube-proxy) too.\n\n")
	w("| tool | wall min / median / max | ratio to kubeadm (range by round) |\n|---|---|---|\n")
	for _, t := range []struct {
		name string
		runs []clusterRun
	}{{"kubeboot init", kb}, {"kubeadm init", ka}} {
		wall := durations(t.runs, initWall)
		ratio := pairRatios(t.runs, ka, initWall, initWall)
		w("| %s | %s / %s / %s | %s (%s–%s) |\n", t.name, fmtSeconds(wall.min), fmtSeconds(wall.median), fmtSeconds(wall.max),
			fmtRatio(wall.median/durations(ka, initWall).median), fmtRatio(ratio.min), fmtRatio(ratio.max))
	}
	w("\nkubeboot's node is handed its CA in its file (`certificates.ca`, as `kubeboot config fleet` writes it, so that the other nodes' files pin its hash) and makes every other certificate within its time, as kubeadm makes all of its own.\n\n")
	components := spanOf(firstNode, stageKubeletStart, firstNode, stageHealthy)
	w("Where kubeboot's time goes (medians):\n\n")
	writeRows(b, kb, []clusterRow{
		{"unit start → kubelet restarted (load the file, preflight, certificates, kubeconfigs, the kubelet's config, the API server's files, manifests rendered, validated and written, kubelet-start's drop-in and restart)", spanOf(firstNode, stageStarted, firstNode, stageKubeletStart)},
		{"of which unit start → preflight passed", spanOf(firstNode, stageStarted, firstNode, stageFirstEvent)},
		{"kubelet restarted → all four components healthy (the kubelet, containerd and the components' own start)", components},
		{"healthy → init returned (bootstrap-admin, upload-config, upload-certs, mark-control-plane, tokens, cluster-info, kubelet-finalize, CSR approver, addons)", afterHealthy},
		{"kubeboot's own: unit start → kubelet restarted, and healthy → init returned", initOwn},
	})
	w("kubeboot's own time is **%s** of kubeadm's init. ", fmtRatio(durations(kb, initOwn).median/durations(ka, initWall).median))
	w("kubeadm waits for the same kubelet and components; even if kubeboot took no time of its own, its init would be that wait, **%s** of kubeadm's init.\n\n",
		fmtRatio(durations(kb, components).median/durations(ka, initWall).median))
}

// joinSection writes kubeboot join beside kubeadm join of one worker.
func (r *report) joinSection(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	kbJoins, kaJoins := r.clusters[scaleJob(1)], r.clusters[jobKubeadmJoin]
	w("### Worker join\n\n")
	w("A kubeboot control plane and one worker machine, `w1`, in two jobs of the same round: `w1` joins with `kubeboot join` in one (the scale series' N = 1 below) ")
	w("and with the real `kubeadm join` in the other, each alone, on the same address. ")
	w("kubeadm join returns once the kubelet holds its client certificate; kubeboot's join goes on to the Node Ready, so both are compared to the client certificate. ")
	w("kubeboot's worker boots with cp1 and its discovery waits for the cluster, so its join is timed from its discovery's success (its successful request takes milliseconds), ")
	w("while cp1 may still be finishing its init; kubeadm's starts once cp1 is up, and its discovery is within its time.\n\n")
	kubeletPart := spanOf("w1", stageKubeletStart, "w1", stageClientCert)
	ratio := pairRatios(kbJoins, kaJoins, joinWall, joinWall)
	w("| | min | median | max |\n|---|---|---|---|\n")
	for _, row := range []struct {
		name string
		runs []clusterRun
		f    func(clusterRun) time.Duration
	}{
		{"kubeboot join: cluster discovered → the kubelet's client certificate", kbJoins, joinWall},
		{"kubeadm join: start → return", kaJoins, joinWall},
		{"kubeboot: cluster discovered → kubelet restarted (preflight, the kubelet's config, the bootstrap kubeconfig, kubelet-start)", kbJoins, spanOf("w1", stageClusterReached, "w1", stageKubeletStart)},
		{"kubeboot: kubelet restarted → its client certificate (the kubelet's start and TLS bootstrap)", kbJoins, kubeletPart},
		{"kubeboot: cluster discovered → Node Ready", kbJoins, spanOf("w1", stageClusterReached, "w1", stageNodeReady)},
	} {
		s := durations(row.runs, row.f)
		w("| %s | %s | %s | %s |\n", row.name, fmtSeconds(s.min), fmtSeconds(s.median), fmtSeconds(s.max))
	}
	w("\nRatio kubeboot / kubeadm: **%s** (range by round %s–%s). ", fmtRatio(durations(kbJoins, joinWall).median/durations(kaJoins, joinWall).median), fmtRatio(ratio.min), fmtRatio(ratio.max))
	w("Even if kubeboot took no time of its own, its join would be the kubelet's part, **%s** of kubeadm's join.\n\n",
		fmtRatio(durations(kbJoins, kubeletPart).median/durations(kaJoins, joinWall).median))
}

// usableSection writes the stages of a usable cluster's bring-up.
func (r *report) usableSection(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	usable := r.clusters[jobUsable]
	w("%s\n\n", usableHeading)
	w("`kubeboot lab up --cluster` of one control plane and two kubeboot workers, from the command's start until a pod on w1 (started right after `lab up` returned, agnhost) ")
	w("resolves `kubernetes.default.svc.cluster.local` through CoreDNS and connects to its ClusterIP through kube-proxy (`agnhost connect`, retried every 100 ms). ")
	w("`go run ./test/bench -only %s` measures this section alone and replaces it here. Before the nodes' containerd stores were preloaded and the machines booted at once, it took %s.\n\n", usableOnly, previousUsable)
	t := usableTarget(usable)
	w("Target: %s; measured %s: **%s**.\n\n", t.limit, t.measured, map[bool]string{true: "met", false: "missed"}[t.met])
	lastWorker := func(na, from, stage string) func(clusterRun) time.Duration {
		return func(r clusterRun) time.Duration {
			var last time.Duration
			for _, n := range []string{"w1", "w2"} {
				last = max(last, spanOf(na, from, n, stage)(r))
			}
			return last
		}
	}
	eachWorker := func(from, stage string) func(clusterRun) time.Duration {
		return func(r clusterRun) time.Duration {
			var last time.Duration
			for _, n := range []string{"w1", "w2"} {
				last = max(last, spanOf(n, from, n, stage)(r))
			}
			return last
		}
	}
	writeRows(b, usable, []clusterRow{
		{"**command start → the pod reached the Service**", usableWall},
		{"`lab up --cluster` alone", func(r clusterRun) time.Duration { return r.end.Sub(r.start) }},
		{"network, load balancer, the packages' layer, the images' store (cached), every machine's disk with its preloaded store, cp1's certificates (command start → installed)", func(r clusterRun) time.Duration { return r.installed.Sub(r.start) }},
		{"the machines' boot, all at once (installed → booted)", func(r clusterRun) time.Duration { return r.booted.Sub(r.installed) }},
		{"cp1's containerd (booted → cp1's bootstrap unit started)", func(r clusterRun) time.Duration { return r.nodes[firstNode][stageStarted].Sub(r.booted) }},
		{"init (kubeboot init, to its return)", initWall},
		{"of which kubeboot's own (before the kubelet restart, and after healthy)", func(r clusterRun) time.Duration {
			return spanOf(firstNode, stageStarted, firstNode, stageKubeletStart)(r) + afterHealthy(r)
		}},
		{"workers: init's return → the later worker's discovery (cluster-info, signed by init, read every 0.5 s once the API server answers)", lastWorker(firstNode, stageDone, stageClusterReached)},
		{"workers: discovery → the kubelet's client certificate, the later worker (its CSR approved and signed by the controller-manager, once it leads and started its controllers)", eachWorker(stageClusterReached, stageClientCert)},
		{"workers: the client certificate → Node Ready, the later worker (registration, the node's pod network)", eachWorker(stageClientCert, stageNodeReady)},
		{"workers: init's return → the later worker's Node Ready", lastWorker(firstNode, stageDone, stageNodeReady)},
		{"pod routes, the addons and the StorageClass rolled out (the last node up → `lab up` returned)", func(r clusterRun) time.Duration { return r.end.Sub(r.lastUp()) }},
		{"probe pod scheduled and Ready, then the Service reached", func(r clusterRun) time.Duration { return r.probed.Sub(r.end) }},
	})
	w("Kubernetes' own start on the same lab, in the same runs: the floor under the stages above, where no kubeboot code runs.\n\n")
	writeRows(b, usable, []clusterRow{
		{"the kubelet restarted → etcd, the API server, the controller-manager and the scheduler healthy (their start on 2 cores; within init)", spanOf(firstNode, stageKubeletStart, firstNode, stageHealthy)},
		{"the kubelet restarted → the controller-manager leads (the API server's start, then the lease acquired: before it, no CSR is signed and no DaemonSet or Deployment has pods)", func(r clusterRun) time.Duration {
			return r.floor.leads.Sub(r.nodes[firstNode][stageKubeletStart])
		}},
		{"the controller-manager leads → it starts the signer of the kubelets' client certificates (it builds every controller first, each one's service account made through its own client, at kubeboot's `--kube-api-qps` and `--kube-api-burst`)", func(r clusterRun) time.Duration {
			return r.floor.signs.Sub(r.floor.leads)
		}},
		{"a CoreDNS pod scheduled → Ready, the later of the two (its sandbox, start and first good readiness probe; conditions stamped to the second)", func(r clusterRun) time.Duration { return r.floor.coreDNS }},
	})
	w("Once the cluster is usable, `kubeboot upgrade apply --config /etc/kubeboot/node.yaml -o json` with nothing to change, run in cp1 through `lab exec` %d times in each run (each must write no file), ", applyRounds)
	w("beside `kubeboot version` through `lab exec` as often, the floor of the exec and a process's start; each run's median:\n\n")
	writeRows(b, usable, []clusterRow{
		{"`upgrade apply`, nothing to change, through `lab exec`", func(r clusterRun) time.Duration { return r.apply.took }},
		{"`kubeboot version` through `lab exec` (the floor)", func(r clusterRun) time.Duration { return r.apply.exec }},
		{"**upgrade apply's own** (the two's difference)", func(r clusterRun) time.Duration { return r.apply.own() }},
		{"of which its first event → its last (the manifests found up to date → the kubelet found unchanged: the uploaded configuration and the addons' objects compared, two requests each (a get, then the server-side apply), and their rollout read)", func(r clusterRun) time.Duration { return r.apply.events }},
	})
}

// usableWall is a usable cluster's headline: from lab up's start until
// the probe pod reached the Service.
func usableWall(r clusterRun) time.Duration { return r.probed.Sub(r.start) }

// scaleSection writes the scale series: N workers joining at once.
func (r *report) scaleSection(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("### Scale: workers joining at once\n\n")
	w("One control plane and N kubeboot workers, all booted at once (N = 2 is the usable cluster above). ")
	w("The join window runs from the first worker's discovery of the cluster to the last worker's Node Ready; the workers' containerd and images were loaded while cp1 came up, ")
	w("all on the same 2 cores. The control plane's CPU is the user + system time of the etcd, kube-apiserver, kube-controller-manager and kube-scheduler ")
	w("processes in cp1's machine (its cgroup) over the window (sampled from the host's /proc every 250 ms), and its memory their summed RSS at its peak in the window. Medians, with the range:\n\n")
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
	w("Three control-plane machines behind the lab's load balancer, booted at once: cp1 inits, and cp2 and cp3 join with `kubeboot join --control-plane` as soon as they can, ")
	w("with the cluster secrets from the kubeadm-certs Secret (the file's certificate key). They join side by side, so one's etcd steps may wait for the other's. ")
	w("Each stage runs from the end of the one before, on the joining node (medians, with the range):\n\n")
	w("| stage | cp2 | cp3 |\n|---|---|---|\n")
	stages := []struct{ name, from, to string }{
		{"cluster secrets fetched → learner added (checks, certificates, kubeconfigs, kubelet start, the etcd member added)", stageClusterReached, stageEtcdAdded},
		{"learner added → its etcd member started and following the leader", stageEtcdAdded, stageEtcdStarted},
		{"caught up and promoted to a voter (etcd refuses the promotion until the learner is in sync)", stageEtcdStarted, stageEtcdPromoted},
		{"promoted → the node's four components healthy", stageEtcdPromoted, stageHealthy},
		{"healthy → join returned", stageHealthy, stageDone},
		{"**whole join**, from the cluster secrets fetched", stageClusterReached, stageDone},
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

// retriesSection writes how many bootstrap attempts failed and were
// retried, which the times above include.
func (r *report) retriesSection(b *strings.Builder) {
	var jobs []string
	for _, job := range clusterJobs {
		n := 0
		for _, run := range r.clusters[job] {
			for _, f := range run.failed {
				n += f
			}
		}
		if n > 0 {
			jobs = append(jobs, fmt.Sprintf("%s %d", job, n))
		}
	}
	said := "none"
	if len(jobs) > 0 {
		said = strings.Join(jobs, ", ")
	}
	fmt.Fprintf(b, "Bootstrap attempts that failed and were retried 10 s later, in the timed rounds (the times above include them): %s.\n\n", said)
}
