package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The pod network's section, which `-only pod-network` measures alone:
// kubeboot's pod network beside kube-router, the other candidate that
// builds here, and the nodes' own path beside both.
const (
	podNetworkOnly    = "pod-network"
	podNetworkHeading = "## Pod network: kubeboot's flannel beside kube-router"
	// podNetworkBefore is the heading the section goes before when the
	// report lacks it.
	podNetworkBefore = "## etcd snapshots: save and restore beside etcdctl and etcdutl"
)

// kubeRouterManifest is kube-router as a user's own pod network, applied
// by init from addons.manifests; kubeRouterImage is its image, which the
// lab builds (build.sh --bench).
var (
	//go:embed kube-router.yaml
	kubeRouterManifest string
)

const (
	kubeRouterImage = "docker.io/cloudnativelabs/kube-router:v2.1.0"
	// kubeRouterPath is where cp1 sees the manifest.
	kubeRouterPath = "/etc/kubeboot/manifests/kube-router.yaml"
)

// podNetworkCandidate is one pod network the section brings a lab up
// with.
type podNetworkCandidate struct {
	name string
	// pods are the name prefixes of its pods in kube-system, one of each
	// per node: whose CPU and memory are its cost.
	pods []string
	// own is a pod network of the user's own: addons.cni.provider none,
	// kube-router's manifest in addons.manifests.
	own bool
}

// podNetworkCandidates are the candidates, in round 0's order; each round
// rotates it.
var podNetworkCandidates = []podNetworkCandidate{
	{name: "flannel v0.28.10 (VXLAN) + kubeboot's NetworkPolicy enforcer", pods: []string{"kube-flannel-", "kubeboot-network-policy-"}},
	{name: "kube-router v2.1.0 (routes by BGP, its NetworkPolicy)", pods: []string{"kube-router-"}, own: true},
}

// The traffic the section measures, from w1 to w2, with iperf 2 in the
// lab's agnhost image: TCP throughput, and the round trip of 100-byte
// requests sent back to back (--bounceback).
const (
	throughputSeconds = 10
	roundTripSeconds  = 5
	// idleWindow is how long the pod network's pods' CPU time is read
	// over, with no traffic.
	idleWindow = 30 * time.Second
	// podPort and hostPort are the iperf servers' ports: a pod's, and one
	// in w2's own network namespace (hostNetwork).
	podPort  = "5001"
	hostPort = "5201"
)

// podNetworkRun is one lab's measurement.
type podNetworkRun struct {
	// podBits and hostBits are the throughput in bits per second, pod to
	// pod and node to node; podRTT and hostRTT the mean round trips.
	podBits, hostBits float64
	podRTT, hostRTT   time.Duration
	// ready is each worker's time from its kubelet's start to Node Ready;
	// certReady from its client certificate to Node Ready.
	ready, certReady []time.Duration
	// cpu is the pod network's pods' CPU per node while idle, in cores;
	// memory their working set per node, in bytes; both the mean over
	// the three nodes.
	cpu, memory float64
	// enforced says a default-deny NetworkPolicy cut the pod path off
	// and its deletion restored it.
	enforced bool
}

// podNetworkResults are each candidate's runs, by its name.
type podNetworkResults map[string]podNetworkRuns

// measurePodNetwork brings a lab up with each candidate, round after
// round in a rotating order, and measures it.
func measurePodNetwork(ctx context.Context, o options, work string) (podNetworkResults, error) {
	results := podNetworkResults{}
	for round := range o.podNetworkRounds {
		for k := range podNetworkCandidates {
			c := podNetworkCandidates[(k+round)%len(podNetworkCandidates)]
			logf("pod network: round %d/%d: %s", round+1, o.podNetworkRounds, c.name)
			run, err := runPodNetwork(ctx, o, work, c)
			if err != nil {
				return nil, fmt.Errorf("pod network %s, round %d: %w", c.name, round+1, err)
			}
			results[c.name] = append(results[c.name], run)
		}
	}
	return results, nil
}

// podNetworkDescription is the lab of one candidate: a control plane and
// two workers.
func podNetworkDescription(c podNetworkCandidate, dir, manifest string) string {
	desc := fmt.Sprintf("apiVersion: kubeboot.io/v1alpha1\nkind: LabCluster\nname: kbb\ndir: %s\nsubnet: %s\npodSubnet: %s\n", dir, clusterSubnet, clusterPods)
	cp1 := "- {name: cp1, role: control-plane}\n"
	if c.own {
		desc += fmt.Sprintf("images: [%s]\nclusterConfigurationPatch: {addons: {cni: {provider: none}, manifests: [%s]}}\n", kubeRouterImage, kubeRouterPath)
		cp1 = fmt.Sprintf("- {name: cp1, role: control-plane, extraMounts: [{hostPath: %s, containerPath: %s, readOnly: true}]}\n", manifest, kubeRouterPath)
	}
	return desc + "nodes:\n" + cp1 + "- {name: w1, role: worker}\n- {name: w2, role: worker}\n"
}

// runPodNetwork brings one candidate's lab up, measures it and tears it
// down.
func runPodNetwork(ctx context.Context, o options, work string, c podNetworkCandidate) (podNetworkRun, error) {
	var run podNetworkRun
	dir, file, manifest := filepath.Join(work, "podnet"), filepath.Join(work, "podnet.yaml"), filepath.Join(work, "kube-router.yaml")
	if err := os.WriteFile(manifest, []byte(kubeRouterManifest), 0o644); err != nil {
		return run, err
	}
	if err := os.WriteFile(file, []byte(podNetworkDescription(c, dir, manifest)), 0o600); err != nil {
		return run, err
	}
	out, err := kubebootJSON(ctx, o, 15*time.Minute, "lab", "up", "--cluster", file, "--bin-dir", o.binDir, "--package", o.pkg, "-o", "json")
	if err == nil {
		err = run.measure(ctx, o, c, out, filepath.Join(dir, "kubeconfig"))
	}
	if err != nil {
		err = errors.Join(err, keepEvents(filepath.Join(o.rawDir, "podnet-failed.jsonl"), out))
	}
	_, downErr := kubebootJSON(context.WithoutCancel(ctx), o, 3*time.Minute, "lab", "down", "--cluster", file, "--bin-dir", o.binDir)
	if err := errors.Join(err, downErr); err != nil {
		return run, err
	}
	return run, leftovers(dir)
}

// measure reads the workers' stages from lab up's events, then measures
// the cluster at kubeconfig.
func (run *podNetworkRun) measure(ctx context.Context, o options, c podNetworkCandidate, events []byte, kubeconfig string) error {
	up, err := parseLabUp(events)
	if err != nil {
		return err
	}
	for _, w := range []string{"w1", "w2"} {
		d := up.span(w, stageKubeletStart, w, stageNodeReady)
		if d <= 0 {
			return fmt.Errorf("node %s: lab up's events show no kubelet start and Node Ready", w)
		}
		run.ready = append(run.ready, d)
		run.certReady = append(run.certReady, up.span(w, stageClientCert, w, stageNodeReady))
	}
	k := kubectlAt(o, kubeconfig)
	if err := k.apply(ctx, iperfPods); err != nil {
		return err
	}
	if _, err := k.run(ctx, "wait", "--for=condition=Ready", "pod", "--all", "--timeout=3m"); err != nil {
		return err
	}
	podIP, err := k.run(ctx, "get", "pod", "iperf-pod", "-o", "jsonpath={.status.podIP}")
	if err != nil {
		return err
	}
	hostIP, err := k.run(ctx, "get", "pod", "iperf-host", "-o", "jsonpath={.status.podIP}")
	if err != nil {
		return err
	}
	if run.podBits, err = k.throughput(ctx, "client-pod", podIP, podPort); err != nil {
		return err
	}
	if run.hostBits, err = k.throughput(ctx, "client-host", hostIP, hostPort); err != nil {
		return err
	}
	if run.podRTT, err = k.roundTrip(ctx, "client-pod", podIP, podPort); err != nil {
		return err
	}
	if run.hostRTT, err = k.roundTrip(ctx, "client-host", hostIP, hostPort); err != nil {
		return err
	}
	if run.enforced, err = k.enforces(ctx, podIP); err != nil {
		return err
	}
	run.cpu, run.memory, err = k.idleCost(ctx, c.pods)
	return err
}

// iperfPods are the section's workload, in the default namespace: an
// iperf server in a pod and one in w2's own network namespace, and a
// client of each on w1.
var iperfPods = fmt.Sprintf(`apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Pod, metadata: {name: iperf-pod, labels: {app: iperf}}, spec: {nodeName: w2, containers: [{name: iperf, image: %[1]s, imagePullPolicy: Never, command: [iperf, -s, -p, "%[2]s"]}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: iperf-host}, spec: {nodeName: w2, hostNetwork: true, containers: [{name: iperf, image: %[1]s, imagePullPolicy: Never, command: [iperf, -s, -p, "%[3]s"]}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: client-pod}, spec: {nodeName: w1, containers: [{name: client, image: %[1]s, imagePullPolicy: Never, args: [pause]}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: client-host}, spec: {nodeName: w1, hostNetwork: true, containers: [{name: client, image: %[1]s, imagePullPolicy: Never, args: [pause]}]}}
`, agnhostImage, podPort, hostPort)

// denyIngress is a default-deny NetworkPolicy of the default namespace's
// ingress.
const denyIngress = `{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "deny-ingress"}, "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}`

// kubectl runs the lab's kubectl against one cluster.
type kubectl struct{ binary, kubeconfig string }

func kubectlAt(o options, kubeconfig string) kubectl {
	return kubectl{binary: filepath.Join(o.binDir, "kubectl"), kubeconfig: kubeconfig}
}

// run runs kubectl with args and returns its output.
func (k kubectl) run(ctx context.Context, args ...string) (string, error) {
	return k.runInput(ctx, "", args...)
}

func (k kubectl) runInput(ctx context.Context, stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, k.binary, append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, lastLines(stderr.String(), 5))
	}
	return strings.TrimSpace(string(out)), nil
}

// apply creates the objects of a manifest.
func (k kubectl) apply(ctx context.Context, manifest string) error {
	_, err := k.runInput(ctx, manifest, "apply", "-f", "-")
	return err
}

// throughput is the bits per second of one TCP stream from client to
// ip:port: the last field of iperf's CSV report
// ("...,0.0-10.0,12345678,9876543210").
func (k kubectl) throughput(ctx context.Context, client, ip, port string) (float64, error) {
	out, err := k.run(ctx, "exec", client, "--", "iperf", "-c", ip, "-p", port, "-t", strconv.Itoa(throughputSeconds), "-y", "C")
	if err != nil {
		return 0, err
	}
	fields := strings.Split(lastLines(out, 1), ",")
	bits, err := strconv.ParseFloat(fields[len(fields)-1], 64)
	if err != nil || bits <= 0 {
		return 0, fmt.Errorf("iperf from %s to %s:%s: no throughput in %q", client, ip, port, out)
	}
	return bits, nil
}

// roundTrip is the mean round trip of 100-byte requests sent back to back
// from client to ip:port, from iperf's bounceback summary, whose
// "count=avg/min/max/stdev ms" field follows its whole interval
// ("[  1] 0.0000-5.0123 sec ... 87988=0.022/0.007/2.234/0.018 ms ...").
func (k kubectl) roundTrip(ctx context.Context, client, ip, port string) (time.Duration, error) {
	out, err := k.run(ctx, "exec", client, "--", "iperf", "-c", ip, "-p", port, "-t", strconv.Itoa(roundTripSeconds), "--bounceback", "--bounceback-period", "0")
	if err != nil {
		return 0, err
	}
	return parseRoundTrip(out)
}

// parseRoundTrip reads the mean round trip of iperf's bounceback
// report: the field "count=avg/min/max/stdev", before "ms", of its last
// line whose interval starts at 0.0000, the whole run's.
func parseRoundTrip(out string) (time.Duration, error) {
	var avg time.Duration
	for line := range strings.Lines(out) {
		fields := strings.Fields(line)
		if len(fields) < 3 || !strings.HasPrefix(fields[2], "0.0000-") {
			continue
		}
		for i, f := range fields[:len(fields)-1] {
			count, stats, ok := strings.Cut(f, "=")
			if !ok || fields[i+1] != "ms" {
				continue
			}
			mean, _, _ := strings.Cut(stats, "/")
			ms, err := strconv.ParseFloat(mean, 64)
			if n, cerr := strconv.Atoi(count); err == nil && cerr == nil && n > 0 {
				avg = time.Duration(ms * float64(time.Millisecond))
			}
		}
	}
	if avg <= 0 {
		return 0, fmt.Errorf("no bounceback summary in iperf's output %q", lastLines(out, 4))
	}
	return avg, nil
}

// enforces applies a default-deny NetworkPolicy and says whether it cut
// the client pod off the server pod within 30 s and its deletion let it
// through again within 30 s.
func (k kubectl) enforces(ctx context.Context, ip string) (bool, error) {
	reaches := func() bool {
		_, err := k.run(ctx, "exec", "client-pod", "--", "/agnhost", "connect", "--timeout=1s", ip+":"+podPort)
		return err == nil
	}
	within := func(want bool) bool {
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
			if reaches() == want {
				return true
			}
		}
		return false
	}
	if !within(true) {
		return false, fmt.Errorf("client-pod never reached %s:%s", ip, podPort)
	}
	if err := k.apply(ctx, denyIngress); err != nil {
		return false, err
	}
	cut := within(false)
	if _, err := k.run(ctx, "delete", "networkpolicy", "deny-ingress"); err != nil {
		return false, err
	}
	return cut && within(true), nil
}

// statsSummary is what this section reads of the kubelet's summary API
// (/stats/summary) of a node.
type statsSummary struct {
	Pods []struct {
		PodRef struct{ Name, Namespace string } `json:"podRef"`
		CPU    struct {
			UsageCoreNanoSeconds float64 `json:"usageCoreNanoSeconds"`
		} `json:"cpu"`
		Memory struct {
			WorkingSetBytes float64 `json:"workingSetBytes"`
		} `json:"memory"`
	} `json:"pods"`
}

// idleCost is the CPU (cores) the pods named by prefixes used over
// idleWindow with no traffic, and their working set (bytes) at its end,
// each summed per node and averaged over the nodes.
func (k kubectl) idleCost(ctx context.Context, prefixes []string) (cpu, memory float64, err error) {
	nodes := []string{firstNode, "w1", "w2"}
	read := func() (cpu, memory []float64, err error) {
		for _, node := range nodes {
			out, err := k.run(ctx, "get", "--raw", "/api/v1/nodes/"+node+"/proxy/stats/summary")
			if err != nil {
				return nil, nil, err
			}
			var s statsSummary
			if err := json.Unmarshal([]byte(out), &s); err != nil {
				return nil, nil, fmt.Errorf("node %s's stats summary: %w", node, err)
			}
			var c, m float64
			found := 0
			for _, p := range s.Pods {
				for _, prefix := range prefixes {
					if p.PodRef.Namespace == "kube-system" && strings.HasPrefix(p.PodRef.Name, prefix) {
						c, m, found = c+p.CPU.UsageCoreNanoSeconds, m+p.Memory.WorkingSetBytes, found+1
					}
				}
			}
			if found != len(prefixes) || m == 0 {
				return nil, nil, fmt.Errorf("node %s's stats summary holds %d of the pods %v, with %.0f bytes of memory", node, found, prefixes, m)
			}
			cpu, memory = append(cpu, c), append(memory, m)
		}
		return cpu, memory, nil
	}
	before, _, err := read()
	if err != nil {
		return 0, 0, err
	}
	time.Sleep(idleWindow)
	after, mem, err := read()
	if err != nil {
		return 0, 0, err
	}
	for i := range nodes {
		cpu += (after[i] - before[i]) / float64(idleWindow.Nanoseconds()) / float64(len(nodes))
		memory += mem[i] / float64(len(nodes))
	}
	return cpu, memory, nil
}

// writePodNetworkOnly is `-only pod-network`: it runs the section alone
// and puts it in the report at -out in place of the section there, the
// rest of the report left as it is.
func writePodNetworkOnly(ctx context.Context, o options, work string) error {
	commit, err := output(ctx, "git", "describe", "--tags", "--always", "--dirty")
	if err != nil {
		return err
	}
	results, err := measurePodNetwork(ctx, o, work)
	if err != nil {
		return err
	}
	var b strings.Builder
	results.markdown(&b, fmt.Sprintf("Measured at kubeboot %s on %s. ", commit, time.Now().UTC().Format("2006-01-02 15:04 MST")))
	return replaceSection(o.out, podNetworkHeading, podNetworkBefore, b.String())
}

// markdown writes the section: each candidate's figures, medians over its
// rounds with their range, and the nodes' own path measured in every lab.
func (r podNetworkResults) markdown(b *strings.Builder, measured string) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	rounds := len(r[podNetworkCandidates[0].name])
	w("%s\n\n%s", podNetworkHeading, measured)
	w("Each candidate brought up a lab of three machines (cp1, w1, w2, one subnet) %d times, the candidates' order rotating round by round. ", rounds)
	w("flannel is kubeboot's `addons.cni` default; kube-router ran as a user's own pod network (`addons.cni.provider: none`, its DaemonSet in `addons.manifests`, test/bench/kube-router.yaml), ")
	w("its only release the module proxy serves. The traffic is iperf 2 in the lab's agnhost image, from w1 to w2: one TCP stream for %d s, and %d s of 100-byte requests sent back to back (`--bounceback`), ", throughputSeconds, roundTripSeconds)
	w("between two pods (the pod network's path) and between two hostNetwork pods (the nodes' own veth path over the lab's bridge, with neither pod network's work on it). ")
	w("CPU and memory are those of the pod network's pods on each node (the kubelet's summary API, CPU over %s with no traffic), the mean over the three nodes. ", idleWindow)
	w("Node Ready is each worker's time from its kubelet's start (kubelet-start's event) to its Node Ready, which waits for the pod network's pod on it; ")
	w("until its client certificate, the kubelet waits for the control plane to sign it, the same for both. Figures are median (min–max).\n\n")
	w("| | %s | %s | the nodes' own path |\n|---|---|---|---|\n", podNetworkCandidates[0].name, podNetworkCandidates[1].name)
	var host podNetworkRuns
	for _, c := range podNetworkCandidates {
		host = append(host, r[c.name]...)
	}
	row := func(what string, f func(podNetworkRuns) string, hostValue string) {
		w("| %s | %s | %s | %s |\n", what, f(r[podNetworkCandidates[0].name]), f(r[podNetworkCandidates[1].name]), hostValue)
	}
	row("throughput, pod on w1 to pod on w2", func(rs podNetworkRuns) string {
		return fmtRange(rs.series(func(x podNetworkRun) float64 { return x.podBits / 1e9 }), "%.2f", "Gbit/s") +
			fmt.Sprintf(", %s of the nodes' own", fmtRatio(rs.median(func(x podNetworkRun) float64 { return x.podBits / x.hostBits })))
	}, fmtRange(host.series(func(x podNetworkRun) float64 { return x.hostBits / 1e9 }), "%.2f", "Gbit/s"))
	row("round trip, pod to pod", func(rs podNetworkRuns) string {
		return fmtRange(rs.series(func(x podNetworkRun) float64 { return float64(x.podRTT.Microseconds()) }), "%.0f", "µs") +
			fmt.Sprintf(", %s of the nodes' own", fmtRatio(rs.median(func(x podNetworkRun) float64 { return float64(x.podRTT) / float64(x.hostRTT) })))
	}, fmtRange(host.series(func(x podNetworkRun) float64 { return float64(x.hostRTT.Microseconds()) }), "%.0f", "µs"))
	row("CPU per node, idle", func(rs podNetworkRuns) string {
		return fmtRange(rs.series(func(x podNetworkRun) float64 { return x.cpu * 1000 }), "%.1f", "millicores")
	}, "-")
	row("memory per node (working set)", func(rs podNetworkRuns) string {
		return fmtRange(rs.series(func(x podNetworkRun) float64 { return x.memory / (1 << 20) }), "%.1f", "MiB")
	}, "-")
	durations := func(f func(podNetworkRun) []time.Duration) func(podNetworkRuns) string {
		return func(rs podNetworkRuns) string {
			var xs []float64
			for _, x := range rs {
				for _, d := range f(x) {
					xs = append(xs, d.Seconds())
				}
			}
			return fmtRange(xs, "%.2f", "s")
		}
	}
	row("kubelet start to Node Ready, worker", durations(func(x podNetworkRun) []time.Duration { return x.ready }), "-")
	row("of which the client certificate to Node Ready", durations(func(x podNetworkRun) []time.Duration { return x.certReady }), "-")
	row("a default-deny NetworkPolicy cut the pods off, its deletion let them through", func(rs podNetworkRuns) string {
		n := 0
		for _, x := range rs {
			if x.enforced {
				n++
			}
		}
		return fmt.Sprintf("%d of %d rounds", n, len(rs))
	}, "-")
	w("\n")
}

// podNetworkRuns are one candidate's runs.
type podNetworkRuns []podNetworkRun

// series maps the runs to numbers.
func (rs podNetworkRuns) series(f func(podNetworkRun) float64) []float64 {
	xs := make([]float64, len(rs))
	for i, x := range rs {
		xs[i] = f(x)
	}
	return xs
}

// median is the median of f over the runs.
func (rs podNetworkRuns) median(f func(podNetworkRun) float64) float64 {
	return summarize(rs.series(f)).median
}

// fmtRange is a series' "median unit (min–max)", each number in the
// format verb.
func fmtRange(xs []float64, verb, unit string) string {
	s := summarize(xs)
	return fmt.Sprintf(verb+" %s ("+verb+"–"+verb+")", s.median, unit, s.min, s.max)
}
