//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/bootstrap"
	"github.com/kubeboot/kubeboot/internal/controlplane"
	"github.com/kubeboot/kubeboot/internal/lab"
	"github.com/kubeboot/kubeboot/internal/machine"
	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// A cluster's life, on machines: a fleet whose every file is written
// before any node is up, a whole-cluster upgrade while a Service is
// probed, and a worker reset and joined again.

// installKubelet installs binDir's kubelet on the machine as its package
// manager would: the new binary written beside /usr/bin/kubelet and
// renamed over it. The running kubelet goes on until it is restarted.
func installKubelet(t *testing.T, m machine.Machine) {
	t.Helper()
	f, err := os.Open(filepath.Join(binDir, "kubelet"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out strings.Builder
	if err := m.Run(context.Background(), f, &out, &out, "sh", "-c",
		"cat > /usr/bin/kubelet.new && chmod 0755 /usr/bin/kubelet.new && mv /usr/bin/kubelet.new /usr/bin/kubelet"); err != nil {
		t.Fatalf("install the kubelet on %s: %v: %s", m.Name, err, out.String())
	}
}

// kubeboot runs kubeboot in the machine and returns its exit code and
// combined output.
func kubebootIn(m machine.Machine, args ...string) (int, string) {
	var out strings.Builder
	err := m.Run(context.Background(), nil, &out, &out, append([]string{"kubeboot"}, args...)...)
	if err == nil {
		return 0, out.String()
	}
	code := -1
	if exitErr, ok := err.(interface{ ExitCode() int }); ok {
		code = exitErr.ExitCode()
	}
	return code, out.String() + err.Error()
}

// clientSerial is the serial of the client certificate the machine's
// kubelet uses.
func clientSerial(t *testing.T, m machine.Machine) string {
	t.Helper()
	// The link names the kubelet's newest pair by its path in the machine.
	path := filepath.Join(m.Root(), "var/lib/kubelet/pki/kubelet-client-current.pem")
	if target, err := os.Readlink(path); err == nil {
		path = filepath.Join(m.Root(), target)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		if block.Type == "CERTIFICATE" {
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			return cert.SerialNumber.String()
		}
	}
	t.Fatalf("no certificate in %s's kubelet-client-current.pem", m.Name)
	return ""
}

// lifeNodesWithKubeadm are lifeNodes and a third worker, w3, that stock
// `kubeadm join` joins.
var lifeNodesWithKubeadm = strings.Replace(lifeNodes, "kubernetesVersion:", "- {name: w3, role: worker, join: kubeadm}\nkubernetesVersion:", 1)

// lifeNodes are the machines of a cluster's life, at v1.35.4.
const lifeNodes = `
- {name: cp1, role: control-plane}
- {name: cp2, role: control-plane}
- {name: w1, role: worker}
- {name: w2, role: worker}
kubernetesVersion: v1.35.4
`

// fleet is the lab of a cluster's life: two control-plane machines and
// two workers (cp1, cp2, w1, w2) behind the lab's load balancer, each
// installed with the kubelet of v1.35 and the images of v1.35.4 and
// v1.36.3, and the pod networks routed between them.
type fleet struct {
	cl *lab.Cluster
	// m are the machines, in the order of their names.
	m []machine.Machine
	// kubeconfig is the lab's kubeconfig on the host, through its load
	// balancer: an administrator's machine.
	kubeconfig string
}

// kubebootFleet brings the fleet up with `kubeboot lab up --cluster`: every
// node's file written before any boots, all booted at once, each brought
// up by kubeboot's bootstrap unit.
func kubebootFleet(t *testing.T, nodes string) (*machineCluster, *fleet) {
	t.Helper()
	c := startMachineCluster(t, "life", "10.89.242.0/24", "10.245.0.0/16", nodes)
	r := runCommand(t, kubebootBin, "lab", "up", "--cluster", c.desc, "--bin-dir", binDir, "--package", kubebootDeb)
	if r.code != 0 {
		t.Fatalf("lab up --cluster exited %d:\n%s", r.code, testsupport.LastLines(r.stderr, 40))
	}
	t.Logf("TIMING: lab up --cluster of the machines at v1.35.4 (all booted at once, addons rolled out): %s", r.took.Round(time.Millisecond))
	f := &fleet{cl: c.lab.Cluster, kubeconfig: c.kubeconfig}
	for _, n := range f.cl.Nodes {
		f.m = append(f.m, c.machine(t, n.Name))
	}
	return c, f
}

// kubectl runs kubectl on cp1 with its admin.conf.
func (f *fleet) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	return inMachine(t, f.m[0], append([]string{"kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf"}, args...)...)
}

// kubectlWait runs kubectl on cp1 until its output is done.
func (f *fleet) kubectlWait(t *testing.T, what string, done func(string) bool, args ...string) {
	t.Helper()
	waitMachine(t, f.m[0], what, done, append([]string{"kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf"}, args...)...)
}

// nodeVersions lists each Node's kubelet release and Ready status, as
// "cp1=v1.35.4/True ...".
const nodeVersions = `jsonpath={range .items[*]}{.metadata.name}={.status.nodeInfo.kubeletVersion}/{.status.conditions[?(@.type=="Ready")].status} {end}`

// waitNodes waits until every node is Ready with the kubelet of version.
func (f *fleet) waitNodes(t *testing.T, version string) {
	t.Helper()
	f.kubectlWait(t, "every node to be Ready at "+version, func(out string) bool { return out == f.atVersion(version) }, "get", "nodes", "-o", nodeVersions)
}

// atVersion is what nodeVersions shows when every node is Ready with the
// kubelet of version.
func (f *fleet) atVersion(version string) string {
	var want []string
	for _, n := range f.cl.Nodes {
		want = append(want, n.Name+"="+version+"/True")
	}
	return strings.Join(want, " ")
}

// spreadWeb is two web pods spread over the workers behind a Service,
// ready once they answer and answering for a while once evicted, with a
// budget that keeps one of them up through any drain.
const spreadWeb = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - {weight: 100, podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}}
      containers:
      - name: web
        image: %q
        imagePullPolicy: Never
        args: [netexec, --http-port=8080]
        readinessProbe: {httpGet: {path: /hostname, port: 8080}, periodSeconds: 1}
        # Served until every kube-proxy has dropped the endpoint, as a
        # workload that drains well does.
        lifecycle: {preStop: {sleep: {seconds: 3}}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: web}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
`

// debugPod is a pod without a controller on cp1, as a user's debugging
// pod would be.
const debugPod = `apiVersion: v1
kind: Pod
metadata: {name: debug, namespace: default}
spec:
  nodeName: cp1
  tolerations: [{operator: Exists}]
  containers:
  - {name: debug, image: %q, imagePullPolicy: Never, args: [pause]}
`

// probeService runs two pods spread over the workers behind a Service,
// with a PodDisruptionBudget, and probes its ClusterIP from w1 until the
// probe is stopped.
func (f *fleet) probeService(t *testing.T) *serviceProbe {
	t.Helper()
	writeFile(t, filepath.Join(f.m[0].Root(), "root/web.yaml"), fmt.Sprintf(spreadWeb, agnhostImage))
	f.kubectl(t, "apply", "-f", "/root/web.yaml")
	f.kubectl(t, "rollout", "status", "deployment/web", "--timeout=180s")
	clusterIP := f.kubectl(t, "get", "service", "web", "-o", "jsonpath={.spec.clusterIP}")
	waitMachine(t, f.m[2], "the Service to answer on w1", func(out string) bool { return strings.HasPrefix(out, "web-") },
		"curl", "-sS", "--max-time", "2", "http://"+clusterIP+"/hostname")
	return newServiceProbe("/run/netns/"+f.cl.Netns("w1"), "http://"+clusterIP+"/hostname")
}

// checkProbe reports the Service's answers during what took, and fails
// on a gap over 30 s.
func checkProbe(t *testing.T, probe *serviceProbe, what string, took time.Duration) {
	t.Helper()
	probes, failures, gap := probe.stop()
	t.Logf("TIMING: %s: %s; the Service answered %d of %d probes, longest gap %s",
		what, took.Round(time.Millisecond), probes-failures, probes, gap.Round(time.Millisecond))
	if gap > 0 {
		t.Logf("the longest gap ended at %s; its last failure: %s; the failures:\n%s", probe.gapEnd.UTC().Format("15:04:05.0"), probe.gapReason,
			testsupport.LastLines(strings.Join(probe.failed, "\n"), 60))
	}
	if probes < 100 || gap > 30*time.Second {
		t.Errorf("the Service's longest gap during %s was %s over %d probes (last failure: %s)", what, gap, probes, probe.gapReason)
	}
}

// upgradeClusterKilled upgrades the fleet with `kubeboot upgrade cluster
// v1.36.3` from the host, through the lab's kubeconfig: a first run is
// killed (SIGKILL) while cp2's upgrade pod runs, and a second takes up
// there, waiting for that pod. It returns how long the whole took.
func (f *fleet) upgradeClusterKilled(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	// This host's cgroups are v1: kubeadm's system verification refuses them.
	args := []string{"upgrade", "cluster", "v1.36.3", "--kubeconfig", f.kubeconfig, "-o", "json", "--kubeadm-ignore-preflight-errors", "SystemVerification"}
	events := killedAt(t, args, 15*time.Minute, "cp2's upgrade pod started", func(line string) bool {
		return strings.Contains(line, `"node":"cp2"`) && strings.Contains(line, "runs on the node")
	})
	t.Logf("TIMING: the first upgrade cluster, SIGKILLed while cp2's upgrade pod ran: %s; its last events:\n%s", time.Since(start).Round(time.Millisecond), strings.Join(events[max(0, len(events)-4):], "\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	r := run(t, ctx, exec.CommandContext(ctx, kubebootBin, args...))
	if r.code != 0 {
		t.Fatalf("upgrade cluster again: exit %d:\n%s\n%s", r.code, testsupport.LastLines(r.stdout, 30), r.stderr)
	}
	for _, want := range []string{"resuming the upgrade to v1.36.3", "waiting for pod kube-system/kubeboot-upgrade-cp2, which a stopped run started", `"outcome":"already at the release"`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the second upgrade cluster does not say %q:\n%s", want, r.stdout)
		}
	}
	t.Logf("TIMING: the second upgrade cluster, which took up at cp2: %s; its result:\n%s", r.took.Round(time.Millisecond), testsupport.LastLines(r.stdout, 1))
	return time.Since(start)
}

// killedAt runs kubeboot with args, which print -o json events, and
// kills it (SIGKILL) at the first event at matches; it returns the events
// printed until then. It fails the test when the run ends before, or
// within limit has not come to, what at looks for: what.
func killedAt(t *testing.T, args []string, limit time.Duration, what string, at func(line string) bool) []string {
	t.Helper()
	cmd := exec.Command(kubebootBin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(limit, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	killed := false
	var events []string
	for scanner := bufio.NewScanner(stdout); scanner.Scan(); {
		events = append(events, scanner.Text())
		if !killed && at(scanner.Text()) {
			_ = cmd.Process.Kill()
			killed = true
		}
	}
	_ = cmd.Wait()
	if !killed {
		t.Fatalf("kubeboot %s ended before %s (%s):\n%s\n%s", strings.Join(args[:2], " "), what, cmd.ProcessState, strings.Join(events, "\n"), stderr.String())
	}
	return events
}

// TestClusterLife: a fleet of two control-plane nodes and two workers
// (and w3, a worker stock `kubeadm join` joins), which `lab up --cluster` provisions with every file written before any
// node is up (a fresh token and certificate key, the CA made beforehand),
// boots at once and forms the cluster at v1.35.4 with no value copied
// between nodes, the second control-plane node with the secrets of
// kubeadm-certs; its pod network, logs, exec and port-forward work
// (checkPodNetwork). Then, after a worker's upgrade was refused while
// the control plane still ran v1.35.4, and upgrade cluster refused to
// drain a pod without a controller, the whole cluster moves to v1.36.3
// with `upgrade cluster` from the host, killed once and resumed, each
// node drained, while a Service whose pods the drains move is probed from
// w1 (upgradeClusterKilled); w3 is upgraded by `kubeadm upgrade node`
// in its upgrade pod. Every node then reports v1.36.3, and so do kubeadm-config and kubelet-config. Then w2
// is reset, its Node deleted, and it joins again, Ready with a new client
// certificate. Last, `certs rotate-ca` from the host replaces the CAs
// and the service-account key (refused first while w3 is down, naming
// it), killed once during cp2's reissue and resumed, with the Service
// probed (rotateCAKilled); every node, cluster-info and the host's
// kubeconfig then trust the new CA alone (checkRotated), and w3 with
// `kubeadm join` and w2 with `kubeboot join` join again with its pin,
// the old pin refused (joinWithNewPin).
func TestClusterLife(t *testing.T) {
	alongside(t)
	c, f := kubebootFleet(t, lifeNodesWithKubeadm)
	cp1, cp2, w1, w2, w3 := f.m[0], f.m[1], f.m[2], f.m[3], f.m[4]
	f.waitNodes(t, "v1.35.4")
	certKey := regexp.MustCompile(`certificateKey: ([0-9a-f]{64})`).FindStringSubmatch(string(readFile(t, filepath.Join(cp1.Root(), bootstrap.ConfigPath))))
	if certKey == nil {
		t.Fatal("cp1's file holds no certificate key")
	}
	if journal := inMachine(t, cp2, "journalctl", "--no-pager", "-u", "kubeboot-bootstrap"); !strings.Contains(journal, "kubeadm-certs") || strings.Contains(journal, certKey[1]) {
		t.Errorf("cp2 did not fetch the secrets from kubeadm-certs, or its journal holds the certificate key:\n%s", testsupport.LastLines(journal, 20))
	}
	checkPodNetwork(t, c)
	probe := f.probeService(t)
	stopped := false
	defer func() {
		if !stopped {
			probe.stop()
		}
	}()

	t.Run("upgrade plan shows the whole cluster's steps", func(t *testing.T) {
		code, out := kubebootIn(cp1, "upgrade", "plan", "v1.36.3", "--config", bootstrap.ConfigPath, "-o", "json")
		var plan controlplane.UpgradePlan
		if code != 0 || json.Unmarshal([]byte(out), &plan) != nil {
			t.Fatalf("upgrade plan: exit %d:\n%s", code, out)
		}
		want := []string{"on cp1: install the kubelet v1.36.3, then kubeboot upgrade apply", "on cp2: install the kubelet v1.36.3, then kubeboot upgrade node",
			"on w1: install the kubelet v1.36.3, then kubeboot upgrade node", "on w2: install the kubelet v1.36.3, then kubeboot upgrade node",
			"on w3: install the kubelet v1.36.3, then "}
		if len(plan.Nodes) != 5 || plan.ClusterVersion != "v1.35.4" || len(plan.Steps) != len(want) {
			t.Fatalf("plan: %+v", plan)
		}
		for i, w := range want {
			if !strings.HasPrefix(plan.Steps[i], w) {
				t.Errorf("step %d: %q, want %q...", i+1, plan.Steps[i], w)
			}
		}
	})
	t.Run("a worker's kubelet is not upgraded before the control plane", func(t *testing.T) {
		installKubelet(t, w1)
		code, out := kubebootIn(w1, "upgrade", "node", "--config", bootstrap.ConfigPath)
		if code == 0 || !strings.Contains(out, "the kubelet on the PATH is v1.36.3, newer than the API server at v1.35.4") {
			t.Errorf("upgrade node on w1 before the control plane: exit %d:\n%s", code, out)
		}
		if got := f.kubectl(t, "get", "node", "w1", "-o", "jsonpath={.status.nodeInfo.kubeletVersion}"); got != "v1.35.4" {
			t.Errorf("after the refusal w1's kubelet is %s", got)
		}
	})
	// checkPodNetwork's pods have no controller: a drain would lose them.
	f.kubectl(t, "delete", "pod", "web-w1", "web-w2")
	t.Run("a drain refuses a pod without a controller, before anything changes", func(t *testing.T) {
		writeFile(t, filepath.Join(cp1.Root(), "root/debug.yaml"), fmt.Sprintf(debugPod, agnhostImage))
		f.kubectl(t, "apply", "-f", "/root/debug.yaml")
		r := runCommand(t, kubebootBin, "upgrade", "cluster", "v1.36.3", "--kubeconfig", f.kubeconfig)
		if r.code != 1 || !strings.Contains(r.stderr, "cp1: drain: pods without a controller would be lost, which nothing brings back: default/debug") {
			t.Errorf("upgrade cluster with a bare pod on cp1: exit %d:\n%s", r.code, r.stderr)
		}
		if got := f.kubectl(t, "get", "node", "cp1", "-o", "jsonpath={.spec.unschedulable}/{.status.nodeInfo.kubeletVersion}"); got != "/v1.35.4" {
			t.Errorf("after the refusal cp1 is unschedulable/kubelet %q, want schedulable at v1.35.4", got)
		}
		f.kubectl(t, "delete", "pod", "debug", "--grace-period=1")
	})
	took := f.upgradeClusterKilled(t)
	stopped = true
	checkProbe(t, probe, "upgrade cluster v1.35.4 -> v1.36.3 (2 control-plane nodes, 3 workers of which kubeadm joined one, each drained; killed once and resumed)", took)

	t.Run("every node, kubeadm-config and kubelet-config say v1.36.3", func(t *testing.T) {
		if got := f.kubectl(t, "get", "nodes", "-o", nodeVersions); got != f.atVersion("v1.36.3") {
			t.Errorf("the nodes: %s", got)
		}
		// w3, which kubeadm joined, was upgraded by kubeadm.
		if got := inMachine(t, w3, "cat", "/run/kubeboot/kubeboot-upgrade-node.log"); !strings.Contains(got, "[upgrade]") || !strings.Contains(got, "successfully") {
			t.Errorf("w3's upgrade unit's output:\n%s", got)
		}
		if got := f.kubectl(t, "-n", "kube-system", "get", "configmap", "kubeadm-config", "-o", "jsonpath={.data.ClusterConfiguration}"); !strings.Contains(got, "kubernetesVersion: v1.36.3\n") {
			t.Errorf("kubeadm-config:\n%s", got)
		}
		if got := f.kubectl(t, "-n", "kube-system", "get", "configmap", "kubelet-config", "-o", `jsonpath={.metadata.annotations.kubeboot\.io/kubernetes-version}`); got != "v1.36.3" {
			t.Errorf("kubelet-config is of release %q", got)
		}
		// The mirror pods of a restarted kubelet come back in a moment.
		f.kubectlWait(t, "three control-plane pods at v1.36.3 on each control-plane node", func(out string) bool {
			images := strings.Fields(out)
			for _, image := range images {
				if !strings.HasSuffix(image, ":v1.36.3") {
					return false
				}
			}
			return len(images) == 6
		}, "-n", "kube-system", "get", "pods", "-l", "component in (kube-apiserver,kube-controller-manager,kube-scheduler)",
			"-o", `jsonpath={range .items[*]}{.spec.nodeName}:{.spec.containers[0].image} {end}`)
		if got := f.kubectl(t, "-n", "kube-system", "get", "daemonset", "kube-proxy", "-o", "jsonpath={.spec.template.spec.containers[0].image}"); got != "registry.k8s.io/kube-proxy:v1.36.3" {
			t.Errorf("kube-proxy runs %s", got)
		}
		if code, out := kubebootIn(w2, "upgrade", "node", "--config", bootstrap.ConfigPath); code != 0 || !strings.Contains(out, "left running") {
			t.Errorf("upgrade node again on w2: exit %d:\n%s", code, out)
		}
	})

	t.Run("a worker reset and joined again is Ready with a new client certificate", func(t *testing.T) {
		before := clientSerial(t, w2)
		code, out := kubebootIn(w2, "reset", "--config", bootstrap.ConfigPath)
		if code != 0 || !strings.Contains(out, "removed /etc/kubernetes/kubelet.conf") {
			t.Fatalf("reset on w2: exit %d:\n%s", code, out)
		}
		if got := inMachine(t, w2, "sh", "-c", "systemctl is-active kubelet || true"); got == "active" {
			t.Errorf("after the reset w2's kubelet is %s", got)
		}
		// The node gets another pod range when it joins again, which the
		// bridge of the old one would refuse: reset removed the pods, then
		// the pod network.
		if got := inMachine(t, w2, "sh", "-c", "ls -d /sys/class/net/cni0 /sys/class/net/flannel.1 /var/lib/cni/networks/cbr0 /etc/cni/net.d/10-flannel.conflist 2>/dev/null || true"); got != "" ||
			!strings.Contains(out, "removed the container runtime's pods") || !strings.Contains(out, "deleted the network interface flannel.1") {
			t.Errorf("after the reset w2 still has %q of its pod network; reset said:\n%s", got, out)
		}
		// Its Node is still Ready for a while: join refuses the name of a
		// Ready Node it holds no credential of, as kubeadm's does, until an
		// administrator deletes it.
		if code, out := kubebootIn(w2, "join", "--config", bootstrap.ConfigPath); code == 0 || !strings.Contains(out, "NodeName: a Node w2 is Ready in the cluster") {
			t.Errorf("join before the Node is deleted: exit %d:\n%s", code, out)
		}
		f.kubectl(t, "delete", "node", "w2")
		start := time.Now()
		if code, out := kubebootIn(w2, "join", "--config", bootstrap.ConfigPath); code != 0 {
			t.Fatalf("join w2 again: exit %d:\n%s", code, out)
		}
		t.Logf("TIMING: w2's join after its reset: %s", time.Since(start).Round(time.Millisecond))
		f.kubectlWait(t, "w2 to be Ready", func(out string) bool { return out == "True" },
			"get", "node", "w2", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if after := clientSerial(t, w2); after == before {
			t.Errorf("w2's kubelet kept its client certificate (serial %s) across the reset", before)
		}
	})

	old := readFile(t, filepath.Join(cp1.Root(), "etc/kubernetes/pki/ca.crt"))
	t.Run("certs rotate-ca refuses to start while a node is down, naming it", func(t *testing.T) { f.rotateCANodeDown(t, w3) })
	probe = f.probeAgain(t)
	took = f.rotateCAKilled(t)
	checkProbe(t, probe, "certs rotate-ca (2 control-plane nodes, 3 workers of which kubeadm joined one; killed once and resumed)", took)
	t.Run("every node trusts the new CAs alone", func(t *testing.T) { f.checkRotated(t, old) })
	t.Run("kubeadm join and kubeboot join with the new pin", func(t *testing.T) { f.joinWithNewPin(t, old) })
}
