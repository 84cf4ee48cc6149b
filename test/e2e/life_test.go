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

// TestClusterLife: a fleet of two control-plane nodes and two workers,
// every file written before any node is up (a preset token and
// certificate key, the CA made by `init phase certs --root` as an image
// builder would), boots at once and forms the cluster at v1.35.4 with no
// value copied between nodes. Then the whole cluster moves to v1.36.3 as
// upgrade plan says, while a Service is probed from w1: the kubelet of
// the new release installed on each node, `upgrade apply` on cp1,
// `upgrade node` on cp2 and on each worker (one refused first, while the
// control plane still runs v1.35.4). Every node then reports v1.36.3, and
// so do kubeadm-config and kubelet-config. Last, w2 is reset, its Node
// deleted, and it joins again, Ready with a new client certificate.
func TestClusterLife(t *testing.T) {
	ctx := context.Background()
	l := newMachineLab(t, "life", "10.89.242.0/24", "cp1:control-plane", "cp2:control-plane", "w1:worker", "w2:worker")
	l.startLoadBalancer(t)
	r := runCommand(t, kubebootBin, "certs", "certificate-key")
	certKey := strings.TrimSpace(r.stdout)
	if r.code != 0 || len(certKey) != 64 {
		t.Fatalf("certs certificate-key: exit %d, %s", r.code, r.stderr)
	}
	agnhost, err := lab.ResolveImage(binDir, agnhostImage)
	if err != nil {
		t.Fatal(err)
	}
	l.images(t, lifeFile(l, 0, "v1.35.4", certKey, ""), []lab.Image{agnhost}, lifeFile(l, 0, "v1.36.3", certKey, ""))
	v135 := kubeletLayer(t, l.root, "v1.35")

	// The fleet's files, all written before any node boots. The CA is
	// made first, offline, on the first node's disk.
	machines := make([]machine.Machine, len(l.cl.Nodes))
	machines[0] = l.machine(t, 0, lifeFile(l, 0, "v1.35.4", certKey, ""))
	if r := runCommand(t, kubebootBin, "init", "phase", "certs", "--config", filepath.Join(machines[0].Root(), bootstrapunit.ConfigPath), "--root", machines[0].Root()); r.code != 0 {
		t.Fatalf("init phase certs --root: exit %d: %s", r.code, r.stderr)
	}
	hash := caHash(t, machines[0])
	for i := 1; i < len(machines); i++ {
		machines[i] = l.machine(t, i, lifeFile(l, i, "v1.35.4", certKey, hash))
	}
	start := time.Now()
	for i := range machines {
		machines[i].UsrLayers = append(machines[i].UsrLayers, v135)
		if err := machines[i].Boot(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cp1, cp2, w1, w2 := machines[0], machines[1], machines[2], machines[3]
	for _, m := range machines {
		waitBootstrapped(t, m)
	}
	t.Logf("TIMING: the fleet's boot until every node's bootstrap unit is done: %s", time.Since(start).Round(time.Millisecond))
	kubectl := func(args ...string) string {
		t.Helper()
		return inMachine(t, cp1, append([]string{"kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf"}, args...)...)
	}
	kubectlWait := func(what string, done func(string) bool, args ...string) {
		t.Helper()
		waitMachine(t, cp1, what, done, append([]string{"kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf"}, args...)...)
	}
	nodeVersions := `jsonpath={range .items[*]}{.metadata.name}={.status.nodeInfo.kubeletVersion}/{.status.conditions[?(@.type=="Ready")].status} {end}`
	kubectlWait("every node to be Ready at v1.35.4", func(out string) bool {
		return out == "cp1=v1.35.4/True cp2=v1.35.4/True w1=v1.35.4/True w2=v1.35.4/True"
	}, "get", "nodes", "-o", nodeVersions)
	if journal := inMachine(t, cp2, "journalctl", "--no-pager", "-u", "kubeboot-bootstrap"); !strings.Contains(journal, "kubeadm-certs") || strings.Contains(journal, certKey) {
		t.Errorf("cp2 did not fetch the secrets from kubeadm-certs, or its journal holds the certificate key:\n%s", tail2(journal, 20))
	}

	// Pods on w2 behind a Service, probed from w1 through its ClusterIP.
	podCIDRs := map[string][]string{}
	for _, line := range strings.Fields(kubectl("get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name}={.spec.podCIDR} {end}`)) {
		name, cidr, _ := strings.Cut(line, "=")
		podCIDRs[name] = []string{cidr}
	}
	if err := l.cl.AddPodRoutes(ctx, podCIDRs); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(cp1.Root(), "root/web.yaml"), fmt.Sprintf(webManifest, agnhostImage, "w2"))
	kubectl("apply", "-f", "/root/web.yaml")
	kubectl("rollout", "status", "deployment/web", "--timeout=180s")
	clusterIP := kubectl("get", "service", "web", "-o", "jsonpath={.spec.clusterIP}")
	w1NS := "/run/netns/" + l.cl.Netns("w1")
	waitMachine(t, w1, "the Service to answer on w1", func(out string) bool { return strings.HasPrefix(out, "web-") },
		"curl", "-sS", "--max-time", "2", "http://"+clusterIP+"/hostname")
	probe := newServiceProbe(w1NS, "http://"+clusterIP+"/hostname")
	probing := time.Now()
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
		if got := kubectl("get", "node", "w1", "-o", "jsonpath={.status.nodeInfo.kubeletVersion}"); got != "v1.35.4" {
			t.Errorf("after the refusal w1's kubelet is %s", got)
		}
	})
	upgrade := func(m machine.Machine, verb string, file string) {
		t.Helper()
		if file != "" {
			writeFile(t, filepath.Join(m.Root(), bootstrapunit.ConfigPath), file)
		}
		installKubelet(t, m)
		start := time.Now()
		code, out := kubebootIn(m, "upgrade", verb, "--config", bootstrapunit.ConfigPath, "-o", "json")
		if code != 0 {
			t.Fatalf("upgrade %s on %s: exit %d:\n%s", verb, m.Name, code, out)
		}
		t.Logf("TIMING: upgrade %s on %s: %s; its last events:\n%s", verb, m.Name, time.Since(start).Round(time.Millisecond), tail2(out, 5))
	}
	upgradeStart := time.Now()
	upgrade(cp1, "apply", lifeFile(l, 0, "v1.36.3", certKey, hash))
	upgrade(cp2, "node", lifeFile(l, 1, "v1.36.3", certKey, hash))
	upgrade(w1, "node", "")
	upgrade(w2, "node", "")
	took := time.Since(upgradeStart)
	probes, failures, gap := probe.stop()
	stopped = true
	t.Logf("TIMING: the whole cluster's upgrade v1.35.4 -> v1.36.3 (2 control-plane nodes, 2 workers): %s; the Service answered %d of %d probes over %s, longest gap %s",
		took.Round(time.Millisecond), probes-failures, probes, time.Since(probing).Round(time.Second), gap.Round(time.Millisecond))
	if probes < 100 || gap > 30*time.Second {
		t.Errorf("the Service's longest gap during the upgrade was %s over %d probes (last failure: %s)", gap, probes, probe.gapReason)
	}

	t.Run("every node, kubeadm-config and kubelet-config say v1.36.3", func(t *testing.T) {
		if got := kubectl("get", "nodes", "-o", nodeVersions); got != "cp1=v1.36.3/True cp2=v1.36.3/True w1=v1.36.3/True w2=v1.36.3/True" {
			t.Errorf("the nodes: %s", got)
		}
		if got := kubectl("-n", "kube-system", "get", "configmap", "kubeadm-config", "-o", "jsonpath={.data.ClusterConfiguration}"); !strings.Contains(got, "kubernetesVersion: v1.36.3\n") {
			t.Errorf("kubeadm-config:\n%s", got)
		}
		if got := kubectl("-n", "kube-system", "get", "configmap", "kubelet-config", "-o", `jsonpath={.metadata.annotations.kubeboot\.io/kubernetes-version}`); got != "v1.36.3" {
			t.Errorf("kubelet-config is of release %q", got)
		}
		// The mirror pods of a restarted kubelet come back in a moment.
		kubectlWait("three control-plane pods at v1.36.3 on each control-plane node", func(out string) bool {
			images := strings.Fields(out)
			for _, image := range images {
				if !strings.HasSuffix(image, ":v1.36.3") {
					return false
				}
			}
			return len(images) == 6
		}, "-n", "kube-system", "get", "pods", "-l", "component in (kube-apiserver,kube-controller-manager,kube-scheduler)",
			"-o", `jsonpath={range .items[*]}{.spec.nodeName}:{.spec.containers[0].image} {end}`)
		if got := kubectl("-n", "kube-system", "get", "daemonset", "kube-proxy", "-o", "jsonpath={.spec.template.spec.containers[0].image}"); got != "registry.k8s.io/kube-proxy:v1.36.3" {
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
		kubectl("delete", "node", "w2")
		start := time.Now()
		if code, out := kubebootIn(w2, "join", "--config", bootstrapunit.ConfigPath); code != 0 {
			t.Fatalf("join w2 again: exit %d:\n%s", code, out)
		}
		t.Logf("TIMING: w2's join after its reset: %s", time.Since(start).Round(time.Millisecond))
		kubectlWait("w2 to be Ready", func(out string) bool { return out == "True" },
			"get", "node", "w2", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if after := clientSerial(t, w2); after == before {
			t.Errorf("w2's kubelet kept its client certificate (serial %s) across the reset", before)
		}
	})
}
