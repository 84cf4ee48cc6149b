//go:build e2e && bench

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/lab"
	"github.com/kubeboot/kubeboot/internal/machine"
	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// kubeadmIgnored are the preflight checks kubeadm fails on a lab
// machine: this host's cgroups are v1 (the kubelet configuration accepts
// them), it may have swap, and a node's network namespace has no bridge
// netfilter setting of its own.
const kubeadmIgnored = "SystemVerification,Swap,FileContent--proc-sys-net-bridge-bridge-nf-call-iptables"

// kubeadmInitConfig is cp1's kubeadm configuration: the fleet's endpoint,
// token, certificate key, pod network, ECDSA keys (kubeboot's default) and
// kubelet settings, and kube-proxy in kubeboot's nftables mode (the lab's
// kube-proxy image holds nft, not iptables) leaving the conntrack table
// alone.
func kubeadmInitConfig(f *kubeadmFleet) string {
	return fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens: [{token: %s}]
certificateKey: %s
localAPIEndpoint: {advertiseAddress: %s, bindPort: 6443}
nodeRegistration: {name: cp1, criSocket: unix:///run/containerd/containerd.sock}
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: %s
kubernetesVersion: v1.35.4
controlPlaneEndpoint: %s
encryptionAlgorithm: ECDSA-P256
networking: {podSubnet: 10.245.0.0/16}
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration%s
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
conntrack: {maxPerCore: 0}
`, fleetToken, f.certKey, f.cl.Address(0), f.cl.Name, f.cl.Endpoint(), strings.ReplaceAll(kubeletSettings, "\n    ", "\n"))
}

// kubeadmFleet is the fleet of a cluster's life that the real kubeadm
// brings up: the same machines, network, load balancer, images and
// kubelet, with no file of kubeboot's.
type kubeadmFleet struct {
	*fleet
	l *bootLab
	// certKey is the fleet's certificate key; hash pins the cluster CA
	// once it exists.
	certKey, hash string
}

// newKubeadmFleet boots the kubeadm fleet's machines, each with the
// kubelet of v1.35 (the description's kubernetesVersion) and the images
// of v1.35.4 and v1.36.3, and none of kubeboot's files.
func newKubeadmFleet(t *testing.T) *kubeadmFleet {
	t.Helper()
	l := newBootLab(t, "life", "10.89.242.0/24", "10.245.0.0/16", lifeNodes)
	f := &kubeadmFleet{fleet: &fleet{cl: l.Cluster}, l: l}
	r := runCommand(t, kubebootBin, "certs", "certificate-key")
	if f.certKey = strings.TrimSpace(r.stdout); r.code != 0 || len(f.certKey) != 64 {
		t.Fatalf("certs certificate-key: exit %d, %s", r.code, r.stderr)
	}
	agnhost, err := lab.ResolveImage(binDir, agnhostImage)
	if err != nil {
		t.Fatal(err)
	}
	release := "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nkubernetesVersion: %s\n"
	l.boot(t, lab.Inputs{ImageConfigs: [][]byte{fmt.Appendf(nil, release, "v1.35.4"), fmt.Appendf(nil, release, "v1.36.3")}, Images: []lab.Image{agnhost}})
	for _, n := range l.Cluster.Nodes {
		f.m = append(f.m, l.machine(t, n.Name))
	}
	return f
}

// inMachineOK runs a command in the machine and fails the test, with its
// output, when it fails.
func inMachineOK(t *testing.T, m machine.Machine, argv ...string) string {
	t.Helper()
	var out strings.Builder
	start := time.Now()
	if err := m.Run(t.Context(), nil, &out, &out, argv...); err != nil {
		t.Fatalf("%s on %s: %v\n%s", strings.Join(argv[:min(len(argv), 3)], " "), m.Name, err, testsupport.LastLines(out.String(), 40))
	}
	t.Logf("TIMING: %s on %s: %s", strings.Join(argv[:min(len(argv), 3)], " "), m.Name, time.Since(start).Round(time.Millisecond))
	return out.String()
}

// upWithKubeadm brings the fleet up as kubeadm's documentation does: init
// on cp1 with --upload-certs, join --control-plane on cp2 with the
// certificate key, join on each worker.
func (f *kubeadmFleet) upWithKubeadm(t *testing.T) {
	t.Helper()
	writeFile(t, filepath.Join(f.m[0].Root(), "root/kubeadm.yaml"), kubeadmInitConfig(f))
	inMachineOK(t, f.m[0], "kubeadm", "init", "--config", "/root/kubeadm.yaml", "--upload-certs", "--ignore-preflight-errors", kubeadmIgnored)
	f.hash = caHash(t, f.m[0])
	for i, m := range f.m[1:] {
		args := []string{"kubeadm", "join", f.cl.Endpoint().String(), "--token", fleetToken, "--discovery-token-ca-cert-hash", f.hash,
			"--node-name", m.Name, "--ignore-preflight-errors", kubeadmIgnored}
		if i == 0 {
			args = append(args, "--control-plane", "--certificate-key", f.certKey, "--apiserver-advertise-address", f.cl.Address(1).String())
		}
		inMachineOK(t, m, args...)
	}
	// A pod network, as a kubeadm user installs one: kubeboot's flannel,
	// through cp1's admin.conf.
	writeFile(t, filepath.Join(f.m[0].Root(), "root/pod-network.yaml"),
		"apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nkubernetesVersion: v1.35.4\nnetworking: {podSubnet: 10.245.0.0/16}\n")
	inMachineOK(t, f.m[0], "kubeboot", "init", "phase", "addon", "cni", "--config", "/root/pod-network.yaml")
}

// upgradeWithKubeadm upgrades the fleet as kubeadm's documentation does:
// on each node, drained first and uncordoned last, the kubelet of v1.36.3
// installed, then `kubeadm upgrade apply` on cp1, `kubeadm upgrade node` on
// the others, each followed by the kubelet's restart and a wait until its
// Node reports v1.36.3 and is Ready and, on a control-plane node, until
// every API server answers ready (what kubeboot's upgrade waits for by
// itself). It returns how long the whole took.
func (f *kubeadmFleet) upgradeWithKubeadm(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	for i, m := range f.m {
		f.drain(t, m.Name)
		installKubelet(t, m)
		if i == 0 {
			inMachineOK(t, m, "kubeadm", "upgrade", "apply", "v1.36.3", "--yes", "--ignore-preflight-errors", kubeadmIgnored)
		} else {
			inMachineOK(t, m, "kubeadm", "upgrade", "node", "--ignore-preflight-errors", kubeadmIgnored)
		}
		inMachineOK(t, m, "sh", "-c", "systemctl daemon-reload && systemctl restart kubelet")
		f.kubectlWait(t, m.Name+"'s kubelet at v1.36.3", func(out string) bool { return out == "v1.36.3/True" },
			"get", "node", m.Name, "-o", `jsonpath={.status.nodeInfo.kubeletVersion}/{.status.conditions[?(@.type=="Ready")].status}`)
		if f.cl.Nodes[i].Role == lab.RoleControlPlane {
			f.waitAPIServersReady(t)
		}
		f.kubectl(t, "uncordon", m.Name)
	}
	return time.Since(start)
}

// waitAPIServersReady waits until each control-plane node's API server,
// asked directly rather than through the load balancer, answers /readyz:
// the kubelet of a new release restarts its static pods, so a Ready Node
// does not yet mean its API server serves.
func (f *kubeadmFleet) waitAPIServersReady(t *testing.T) {
	t.Helper()
	for i, n := range f.cl.Nodes {
		if n.Role != lab.RoleControlPlane {
			continue
		}
		server := "https://" + netip.AddrPortFrom(f.cl.Address(i), 6443).String()
		f.kubectlWait(t, n.Name+"'s API server to be ready", func(out string) bool { return out == "ok" },
			"--server", server, "get", "--raw", "/readyz")
	}
}

// cutOff tells whether kubectl's output shows a request cut off by an API
// server going away, not a refusal of the request.
func cutOff(out string) bool {
	for _, e := range []string{"unexpected EOF", "connection refused", "connection reset by peer", "TLS handshake timeout"} {
		if strings.Contains(out, e) {
			return true
		}
	}
	return false
}

// drain drains the node with kubectl on cp1, as its user would: a drain
// cut off by an API server's restart behind the load balancer (its
// connection closed mid-request) is run again, up to five times.
func (f *kubeadmFleet) drain(t *testing.T, node string) {
	t.Helper()
	argv := []string{"kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=5m"}
	for attempt := 1; ; attempt++ {
		var out strings.Builder
		err := f.m[0].Run(t.Context(), nil, &out, &out, argv...)
		if err == nil {
			return
		}
		if attempt == 5 || !cutOff(out.String()) {
			t.Fatalf("drain %s (attempt %d): %v\n%s", node, attempt, err, testsupport.LastLines(out.String(), 40))
		}
		t.Logf("drain %s (attempt %d) cut off, running it again: %s", node, attempt, testsupport.LastLines(out.String(), 3))
		time.Sleep(2 * time.Second)
	}
}

// upgradeCluster upgrades the fleet with `kubeboot upgrade cluster
// v1.36.3` from the host, through the lab's kubeconfig, in one run. The
// lab's kubelet.installCommand installs each node's kubelet. It returns
// how long it took.
func (f *fleet) upgradeCluster(t *testing.T) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	r := run(t, ctx, exec.CommandContext(ctx, kubebootBin, "upgrade", "cluster", "v1.36.3", "--kubeconfig", f.kubeconfig))
	if r.code != 0 {
		t.Fatalf("upgrade cluster: exit %d:\n%s", r.code, testsupport.LastLines(r.stderr, 30))
	}
	return r.took
}

// rotateCA rotates the fleet's CAs with `kubeboot certs rotate-ca` from the
// host, through the lab's kubeconfig, in one run. It returns how long it
// took.
func (f *fleet) rotateCA(t *testing.T) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	r := run(t, ctx, exec.CommandContext(ctx, kubebootBin, "certs", "rotate-ca", "--kubeconfig", f.kubeconfig))
	if r.code != 0 {
		t.Fatalf("certs rotate-ca: exit %d:\n%s", r.code, testsupport.LastLines(r.stderr, 30))
	}
	return r.took
}

// TestUpgradeBench times the whole-cluster upgrade of the fleet, v1.35.4
// to v1.36.3 on two control-plane nodes and two workers, with kubeboot's
// `upgrade cluster` (upgradeCluster) and kubeadm's (upgradeWithKubeadm), each
// on a fleet of its own brought up by the same tool, in alternating order
// over $KUBEBOOT_BENCH_ROUNDS rounds (default 1), while a Service is
// probed. Each measurement is a line "BENCH cluster-upgrade TOOL SECONDS
// GAP-SECONDS" on stdout, which `make bench` reads; on kubeboot's fleet,
// upgraded, `certs rotate-ca` follows, its line "BENCH rotate-ca
// kubeboot SECONDS GAP-SECONDS" (kubeadm has no CA rotation). Not part of `make
// test`: build tag bench.
func TestUpgradeBench(t *testing.T) {
	rounds := 1
	if s := os.Getenv("KUBEBOOT_BENCH_ROUNDS"); s != "" {
		var err error
		if rounds, err = strconv.Atoi(s); err != nil || rounds < 1 {
			t.Fatalf("KUBEBOOT_BENCH_ROUNDS=%q: want a positive number", s)
		}
	}
	for round := 1; round <= rounds; round++ {
		tools := []string{"kubeboot", "kubeadm"}
		if round%2 == 0 {
			slices.Reverse(tools)
		}
		for _, tool := range tools {
			t.Run(fmt.Sprintf("%s-%d", tool, round), func(t *testing.T) {
				var f *fleet
				var upgrade func(*testing.T) time.Duration
				if tool == "kubeboot" {
					_, f = kubebootFleet(t, lifeNodes)
					upgrade = f.upgradeCluster
				} else {
					k := newKubeadmFleet(t)
					k.upWithKubeadm(t)
					f, upgrade = k.fleet, k.upgradeWithKubeadm
				}
				f.waitNodes(t, "v1.35.4")
				probe := f.probeService(t)
				took := upgrade(t)
				_, _, gap := probe.stop()
				f.waitNodes(t, "v1.36.3")
				fmt.Printf("BENCH cluster-upgrade %s %.1f %.1f\n", tool, took.Seconds(), gap.Seconds())
				if tool == "kubeboot" {
					probe := f.probeAgain(t)
					took := f.rotateCA(t)
					_, _, gap := probe.stop()
					fmt.Printf("BENCH rotate-ca %s %.1f %.1f\n", tool, took.Seconds(), gap.Seconds())
				}
			})
		}
	}
}
