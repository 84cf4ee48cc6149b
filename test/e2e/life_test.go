//go:build e2e

package e2e

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/bootstrapunit"
	"github.com/kubeboot/kubeboot/day2"
	"github.com/kubeboot/kubeboot/lab"
	"github.com/kubeboot/kubeboot/machine"
)

// A cluster's life, on machines: a fleet whose every file is written
// before any node is up, a whole-cluster upgrade while a Service is
// probed, and a worker reset and joined again.

// lifeSettings are the cluster settings of both control-plane nodes' files
// at release version: the lab's load balancer as the endpoint, the fleet's
// token and certificate key, this host's kubelet settings, and kube-proxy
// leaving the host's conntrack table size alone (see lab.NodeConfig).
func lifeSettings(l *machineLab, version, certKey string) string {
	return fmt.Sprintf(`clusterName: %s
kubernetesVersion: %s
controlPlaneEndpoint: %s
networking:
  podSubnet: 10.245.0.0/16
bootstrapTokens:
- token: %s
certificateKey: %s
kubelet:
  extraConfig:%s
addons:
  kubeProxy:
    extraConfig:
      conntrack: {maxPerCore: 0}
`, l.cl.Name, version, l.cl.Endpoint(), fleetToken, certKey, kubeletSettings)
}

// lifeFile is the file of the i-th node, a control-plane node's at
// version (the first inits, the second joins with the certificate key) or
// a worker's; caHash pins the CA made before any node was up.
func lifeFile(l *machineLab, i int, version, certKey, caHash string) string {
	node := l.cl.Nodes[i]
	discovery := fmt.Sprintf("{apiServerEndpoint: %q, token: %s, caCertHashes: [%q]}", l.cl.Endpoint(), fleetToken, caHash)
	switch {
	case i == 0:
		return fmt.Sprintf("apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nnode: {name: %s, advertiseAddress: %s}\n%s",
			node.Name, l.cl.Address(i), lifeSettings(l, version, certKey))
	case node.Role == "control-plane":
		return fmt.Sprintf("apiVersion: kubeboot.io/v1alpha1\nkind: JoinConfiguration\nnode: {name: %s, advertiseAddress: %s}\n%sjoin:\n  certificateKey: %s\n  discovery: %s\n",
			node.Name, l.cl.Address(i), lifeSettings(l, version, certKey), certKey, discovery)
	}
	return fmt.Sprintf("apiVersion: kubeboot.io/v1alpha1\nkind: WorkerConfiguration\nnode: {name: %s}\ndiscovery: %s\nkubelet:\n  extraConfig:%s\n",
		node.Name, discovery, kubeletSettings)
}

// startLoadBalancer runs the lab's load balancer in front of the
// control-plane nodes, stopped when the test ends (before the machines are
// removed).
func (l *machineLab) startLoadBalancer(t *testing.T) {
	t.Helper()
	hostAPI, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listener, err := hostAPI.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	_ = hostAPI.Close()
	defer func() { _ = listener.Close() }()
	if err := l.cl.StartLoadBalancer(context.Background(), listener); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.cl.LoadBalancer().Stop(10 * time.Second); err != nil {
			t.Error(err)
		}
	})
}

// kubeletLayer is a layer over the machines' /usr holding the kubelet of
// binDir/minor, the release a node is installed with.
func kubeletLayer(t *testing.T, dir, minor string) string {
	t.Helper()
	layer := filepath.Join(dir, "kubelet-"+minor)
	if err := os.MkdirAll(filepath.Join(layer, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(binDir, minor, "kubelet"))
	if err != nil {
		t.Fatalf("the kubelet of %s (`make binaries` builds it): %v", minor, err)
	}
	writeFile(t, filepath.Join(layer, "bin", "kubelet"), string(data))
	if err := os.Chmod(filepath.Join(layer, "bin", "kubelet"), 0o755); err != nil {
		t.Fatal(err)
	}
	return layer
}

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

// fleet is the lab of a cluster's life: two control-plane machines and
// two workers (cp1, cp2, w1, w2) behind the lab's load balancer, each
// installed with the kubelet of v1.35 and the images of v1.35.4 and
// v1.36.3.
type fleet struct {
	*machineLab
	// m are the machines, in the order of their names.
	m []machine.Machine
	// certKey is the fleet's certificate key; hash pins the cluster CA
	// once it exists.
	certKey, hash string
}

// newFleet sets the fleet's machines up, not yet booted. With files, each
// gets its kubeboot file, all written before any node is up, the CA made
// first, offline, on cp1's disk (`init phase certs --root`, as an image
// builder would); without, another tool brings them up.
func newFleet(t *testing.T, files bool) *fleet {
	t.Helper()
	f := &fleet{machineLab: newMachineLab(t, "life", "10.89.242.0/24", "cp1:control-plane", "cp2:control-plane", "w1:worker", "w2:worker")}
	f.startLoadBalancer(t)
	r := runCommand(t, kubebootBin, "certs", "certificate-key")
	if f.certKey = strings.TrimSpace(r.stdout); r.code != 0 || len(f.certKey) != 64 {
		t.Fatalf("certs certificate-key: exit %d, %s", r.code, r.stderr)
	}
	agnhost, err := lab.ResolveImage(binDir, agnhostImage)
	if err != nil {
		t.Fatal(err)
	}
	f.images(t, lifeFile(f.machineLab, 0, "v1.35.4", f.certKey, ""), []lab.Image{agnhost}, lifeFile(f.machineLab, 0, "v1.36.3", f.certKey, ""))
	v135 := kubeletLayer(t, f.root, "v1.35")
	file := func(i int) string {
		if !files {
			return ""
		}
		return lifeFile(f.machineLab, i, "v1.35.4", f.certKey, f.hash)
	}
	f.m = make([]machine.Machine, len(f.cl.Nodes))
	for i := range f.m {
		f.m[i] = f.machine(t, i, file(i))
		f.m[i].UsrLayers = append(f.m[i].UsrLayers, v135)
		if i == 0 && files {
			if r := runCommand(t, kubebootBin, "init", "phase", "certs", "--config", filepath.Join(f.m[0].Root(), bootstrapunit.ConfigPath), "--root", f.m[0].Root()); r.code != 0 {
				t.Fatalf("init phase certs --root: exit %d: %s", r.code, r.stderr)
			}
			f.hash = caHash(t, f.m[0])
		}
	}
	return f
}

// boot boots every machine at once.
func (f *fleet) boot(t *testing.T) {
	t.Helper()
	for _, m := range f.m {
		if err := m.Boot(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
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
	want := strings.NewReplacer("V", version).Replace("cp1=V/True cp2=V/True w1=V/True w2=V/True")
	f.kubectlWait(t, "every node to be Ready at "+version, func(out string) bool { return out == want }, "get", "nodes", "-o", nodeVersions)
}

// probeService runs two pods on w2 behind a Service and probes its
// ClusterIP from w1 until the probe is stopped.
func (f *fleet) probeService(t *testing.T) *serviceProbe {
	t.Helper()
	podCIDRs := map[string][]string{}
	for _, line := range strings.Fields(f.kubectl(t, "get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name}={.spec.podCIDR} {end}`)) {
		name, cidr, _ := strings.Cut(line, "=")
		podCIDRs[name] = []string{cidr}
	}
	if err := f.cl.AddPodRoutes(context.Background(), podCIDRs); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(f.m[0].Root(), "root/web.yaml"), fmt.Sprintf(webManifest, agnhostImage, "w2"))
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
	if probes < 100 || gap > 30*time.Second {
		t.Errorf("the Service's longest gap during %s was %s over %d probes (last failure: %s)", what, gap, probes, probe.gapReason)
	}
}

// upgradeWithKubeboot upgrades the fleet as upgrade plan says: on each
// node the kubelet of v1.36.3 installed, then upgrade apply on cp1 (its
// file at v1.36.3), upgrade node on cp2 (its file at v1.36.3) and on each
// worker. It returns how long the whole took.
func (f *fleet) upgradeWithKubeboot(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	for i, m := range f.m {
		verb, file := "node", ""
		switch i {
		case 0:
			verb, file = "apply", lifeFile(f.machineLab, i, "v1.36.3", f.certKey, f.hash)
		case 1:
			file = lifeFile(f.machineLab, i, "v1.36.3", f.certKey, f.hash)
		}
		if file != "" {
			writeFile(t, filepath.Join(m.Root(), bootstrapunit.ConfigPath), file)
		}
		installKubelet(t, m)
		step := time.Now()
		code, out := kubebootIn(m, "upgrade", verb, "--config", bootstrapunit.ConfigPath, "-o", "json")
		if code != 0 {
			t.Fatalf("upgrade %s on %s: exit %d:\n%s", verb, m.Name, code, out)
		}
		t.Logf("TIMING: upgrade %s on %s: %s; its last events:\n%s", verb, m.Name, time.Since(step).Round(time.Millisecond), tail2(out, 5))
	}
	return time.Since(start)
}

// TestClusterLife: a fleet of two control-plane nodes and two workers,
// every file written before any node is up (a preset token and
// certificate key, the CA made beforehand), boots at once and forms the
// cluster at v1.35.4 with no value copied between nodes. Then the whole
// cluster moves to v1.36.3 as upgrade plan says, while a Service is
// probed from w1 (upgradeWithKubeboot), after a worker's upgrade was
// refused while the control plane still ran v1.35.4. Every node then
// reports v1.36.3, and so do kubeadm-config and kubelet-config. Last, w2
// is reset, its Node deleted, and it joins again, Ready with a new client
// certificate.
func TestClusterLife(t *testing.T) {
	f := newFleet(t, true)
	cp1, cp2, w1, w2 := f.m[0], f.m[1], f.m[2], f.m[3]
	start := time.Now()
	f.boot(t)
	for _, m := range f.m {
		waitBootstrapped(t, m)
	}
	t.Logf("TIMING: the fleet's boot until every node's bootstrap unit is done: %s", time.Since(start).Round(time.Millisecond))
	f.waitNodes(t, "v1.35.4")
	if journal := inMachine(t, cp2, "journalctl", "--no-pager", "-u", "kubeboot-bootstrap"); !strings.Contains(journal, "kubeadm-certs") || strings.Contains(journal, f.certKey) {
		t.Errorf("cp2 did not fetch the secrets from kubeadm-certs, or its journal holds the certificate key:\n%s", tail2(journal, 20))
	}
	probe := f.probeService(t)
	stopped := false
	defer func() {
		if !stopped {
			probe.stop()
		}
	}()

	t.Run("upgrade plan shows the whole cluster's steps", func(t *testing.T) {
		code, out := kubebootIn(cp1, "upgrade", "plan", "v1.36.3", "--config", bootstrapunit.ConfigPath, "-o", "json")
		var plan day2.UpgradePlan
		if code != 0 || json.Unmarshal([]byte(out), &plan) != nil {
			t.Fatalf("upgrade plan: exit %d:\n%s", code, out)
		}
		want := []string{"on cp1: install the kubelet v1.36.3, then kubeboot upgrade apply", "on cp2: install the kubelet v1.36.3, then kubeboot upgrade node",
			"on w1: install the kubelet v1.36.3, then kubeboot upgrade node", "on w2: install the kubelet v1.36.3, then kubeboot upgrade node"}
		if len(plan.Nodes) != 4 || plan.ClusterVersion != "v1.35.4" || len(plan.Steps) != len(want) {
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
		code, out := kubebootIn(w1, "upgrade", "node", "--config", bootstrapunit.ConfigPath)
		if code == 0 || !strings.Contains(out, "the kubelet on the PATH is v1.36.3, newer than the API server at v1.35.4") {
			t.Errorf("upgrade node on w1 before the control plane: exit %d:\n%s", code, out)
		}
		if got := f.kubectl(t, "get", "node", "w1", "-o", "jsonpath={.status.nodeInfo.kubeletVersion}"); got != "v1.35.4" {
			t.Errorf("after the refusal w1's kubelet is %s", got)
		}
	})
	took := f.upgradeWithKubeboot(t)
	stopped = true
	checkProbe(t, probe, "the whole cluster's upgrade v1.35.4 -> v1.36.3 (2 control-plane nodes, 2 workers)", took)

	t.Run("every node, kubeadm-config and kubelet-config say v1.36.3", func(t *testing.T) {
		if got := f.kubectl(t, "get", "nodes", "-o", nodeVersions); got != "cp1=v1.36.3/True cp2=v1.36.3/True w1=v1.36.3/True w2=v1.36.3/True" {
			t.Errorf("the nodes: %s", got)
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
		if code, out := kubebootIn(w2, "upgrade", "node", "--config", bootstrapunit.ConfigPath); code != 0 || !strings.Contains(out, "left running") {
			t.Errorf("upgrade node again on w2: exit %d:\n%s", code, out)
		}
	})

	t.Run("a worker reset and joined again is Ready with a new client certificate", func(t *testing.T) {
		before := clientSerial(t, w2)
		code, out := kubebootIn(w2, "reset", "--config", bootstrapunit.ConfigPath)
		if code != 0 || !strings.Contains(out, "removed /etc/kubernetes/kubelet.conf") {
			t.Fatalf("reset on w2: exit %d:\n%s", code, out)
		}
		if got := inMachine(t, w2, "sh", "-c", "systemctl is-active kubelet || true"); got == "active" {
			t.Errorf("after the reset w2's kubelet is %s", got)
		}
		// Its Node is still Ready for a while: join refuses the name of a
		// Ready Node it holds no credential of, as kubeadm's does, until an
		// administrator deletes it.
		if code, out := kubebootIn(w2, "join", "--config", bootstrapunit.ConfigPath); code == 0 || !strings.Contains(out, "NodeName: a Node w2 is Ready in the cluster") {
			t.Errorf("join before the Node is deleted: exit %d:\n%s", code, out)
		}
		f.kubectl(t, "delete", "node", "w2")
		start := time.Now()
		if code, out := kubebootIn(w2, "join", "--config", bootstrapunit.ConfigPath); code != 0 {
			t.Fatalf("join w2 again: exit %d:\n%s", code, out)
		}
		t.Logf("TIMING: w2's join after its reset: %s", time.Since(start).Round(time.Millisecond))
		f.kubectlWait(t, "w2 to be Ready", func(out string) bool { return out == "True" },
			"get", "node", "w2", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if after := clientSerial(t, w2); after == before {
			t.Errorf("w2's kubelet kept its client certificate (serial %s) across the reset", before)
		}
	})
}
