//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubeboot/kubeboot/lab"
	"github.com/kubeboot/kubeboot/machine"
	"github.com/kubeboot/kubeboot/pki"
)

// machineImages builds the archive of the images the nodes'
// configurations name, the sandbox image and extra.
func machineImages(t *testing.T, cacheDir string, extra []lab.Image, cfgPaths ...string) string {
	t.Helper()
	refs := []string{lab.SandboxImage}
	for _, cfgPath := range cfgPaths {
		r := runCommand(t, kubebootBin, "images", "list", "--config", cfgPath)
		if r.code != 0 {
			t.Fatalf("images list exited %d: %s", r.code, r.stderr)
		}
		refs = append(refs, strings.Fields(r.stdout)...)
	}
	slices.Sort(refs)
	var images []lab.Image
	for _, ref := range slices.Compact(refs) {
		var img lab.Image
		var err error
		if strings.Contains(ref, "kubeboot") {
			img, err = lab.KubebootImage(ref, kubebootBin)
		} else {
			img, err = lab.ResolveImage(binDir, ref)
		}
		if err != nil {
			t.Fatal(err)
		}
		images = append(images, img)
	}
	archive, err := lab.Archive(cacheDir, append(images, extra...))
	if err != nil {
		t.Fatal(err)
	}
	return archive
}

// writeFile writes content to path, making its directory.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

const (
	// fleetToken is the fleet's bootstrap token, written into every node's
	// file before the cluster exists.
	fleetToken = "abcdef.0123456789abcdef"
	// kubeletSettings are the kubelet settings this host needs: its
	// cgroups are v1, it may have swap, and its disk may be crowded.
	kubeletSettings = `
    failCgroupV1: false
    failSwapOn: false
    evictionHard: {imagefs.available: "0%", nodefs.available: "0%", nodefs.inodesFree: "0%"}
    imageGCHighThresholdPercent: 100`
)

// machineLab is a lab of machines on one network.
type machineLab struct {
	cl      *lab.Cluster
	root    string
	layer   string
	archive string
	// machines are removed, in order, when the test ends.
	machines []machine.Machine
}

// newMachineLab sets up the network of a lab of nodes (name:role, ...)
// and registers the cleanup that removes every machine and the network,
// and checks that nothing of them is left on the host.
func newMachineLab(t *testing.T, name, subnet string, nodes ...string) *machineLab {
	t.Helper()
	ctx := context.Background()
	root, err := os.MkdirTemp("", "kb-ml-")
	if err != nil {
		t.Fatal(err)
	}
	list := ""
	for _, n := range nodes {
		node, role, _ := strings.Cut(n, ":")
		list += fmt.Sprintf("{name: %s, role: %s}, ", node, role)
	}
	desc := filepath.Join(root, "cluster.yaml")
	writeFile(t, desc, "apiVersion: kubeboot.io/v1alpha1\nkind: LabCluster\nname: "+name+"\ndir: "+filepath.Join(root, "c")+
		"\nsubnet: "+subnet+"\npodSubnet: 10.245.0.0/16\nnodes: ["+strings.TrimSuffix(list, ", ")+"]\n")
	cl, err := lab.LoadCluster(desc)
	if err != nil {
		t.Fatal(err)
	}
	l := &machineLab{cl: cl, root: root}
	before := hostNetworkState(t)
	hostBefore := hostFiles()
	t.Cleanup(func() {
		for _, m := range l.machines {
			if t.Failed() {
				if out, err := m.Output(ctx, "journalctl", "--no-pager", "-n", "40", "-u", "kubeboot-bootstrap", "-u", "kubelet"); err == nil {
					t.Logf("the journal of %s:\n%s", m.Name, out)
				}
			}
			if err := m.Remove(30 * time.Second); err != nil {
				t.Error(err)
			}
		}
		if err := cl.TearDownNetwork(ctx); err != nil {
			t.Error(err)
		}
		after := hostNetworkState(t)
		if !slices.Equal(before.namespaces, after.namespaces) || !slices.Equal(before.links, after.links) {
			t.Errorf("the host's network differs after the machines are removed:\nbefore %v %v\nafter  %v %v", before.namespaces, before.links, after.namespaces, after.links)
		}
		if left := processesUnder(root); len(left) > 0 {
			t.Errorf("processes of the machines remain:\n%s", describe(left))
		}
		if hostAfter := hostFiles(); !slices.Equal(hostBefore, hostAfter) {
			t.Errorf("the host's node files differ:\nbefore %q\nafter  %q", hostBefore, hostAfter)
		}
		if !t.Failed() {
			_ = os.RemoveAll(root)
		}
	})
	if err := cl.SetUpNetwork(ctx); err != nil {
		t.Fatal(err)
	}
	if l.layer, err = lab.UsrLayer(root, binDir, kubebootBin); err != nil {
		t.Fatal(err)
	}
	return l
}

// hostFiles lists what a node would write on the host: the entries of its
// Kubernetes dirs, /run and the cgroup hierarchies' top level.
func hostFiles() []string {
	var names []string
	for _, dir := range []string{"/etc/kubernetes", "/var/lib/kubelet", "/etc/kubeboot", "/run"} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			names = append(names, filepath.Join(dir, e.Name()))
		}
	}
	tops, _ := filepath.Glob("/sys/fs/cgroup/*/*/")
	return append(names, tops...)
}

// images builds, once, the archive of the images cfg and more name, the
// sandbox image and extra; every machine's containerd loads it at boot.
func (l *machineLab) images(t *testing.T, cfg string, extra []lab.Image, more ...string) {
	t.Helper()
	var paths []string
	for i, c := range append([]string{cfg}, more...) {
		path := filepath.Join(l.root, fmt.Sprintf("images-%d.yaml", i))
		writeFile(t, path, c)
		paths = append(paths, path)
	}
	l.archive = machineImages(t, filepath.Join(l.root, "images"), extra, paths...)
}

// clusterFile is the first control-plane node's file: its address on the
// lab's network, the fleet's token, this host's kubelet settings, and no
// addons.
func clusterFile(l *machineLab) string {
	return fmt.Sprintf(`apiVersion: kubeboot.io/v1alpha1
kind: ClusterConfiguration
clusterName: %s
node:
  name: %s
  advertiseAddress: %s
networking:
  podSubnet: 10.245.0.0/16
bootstrapTokens:
- token: %s
kubelet:
  extraConfig:%s
addons:
  coreDNS:
    disabled: true
  kubeProxy:
    disabled: true
`, l.cl.Name, l.cl.Nodes[0].Name, l.cl.Address(0), fleetToken, kubeletSettings)
}

// workerFile is the second node's file: a worker that discovers the
// cluster through the first node with the fleet's token and the CA's hash.
func workerFile(l *machineLab, caHash string) string {
	return fmt.Sprintf(`apiVersion: kubeboot.io/v1alpha1
kind: WorkerConfiguration
node:
  name: %s
discovery:
  apiServerEndpoint: %s:6443
  token: %s
  caCertHashes: [%s]
kubelet:
  extraConfig:%s
`, l.cl.Nodes[1].Name, l.cl.Address(0), fleetToken, caHash, kubeletSettings)
}

// caHash is the hash of the CA the machine's control plane made.
func caHash(t *testing.T, m machine.Machine) string {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(m.Root(), "etc/kubernetes/pki/ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	hash, err := pki.CACertHash(ca)
	if err != nil {
		t.Fatal(err)
	}
	return hash
}

// machine installs the i-th node's machine, with nodeFile as its only
// input (none: another tool brings it up); it is removed when the test
// ends.
func (l *machineLab) machine(t *testing.T, i int, nodeFile string) machine.Machine {
	t.Helper()
	m := l.cl.Machine(i, filepath.Join(l.root, "m"), l.layer, l.archive, binDir)
	l.machines = append([]machine.Machine{m}, l.machines...) // workers go first
	var file []byte
	if nodeFile != "" {
		file = []byte(nodeFile)
	}
	if err := lab.InstallNode(m, file); err != nil {
		t.Fatal(err)
	}
	return m
}

// waitBootstrapped waits until the machine's bootstrap unit has finished,
// and fails when it failed.
func waitBootstrapped(t *testing.T, m machine.Machine) {
	t.Helper()
	waitMachine(t, m, "kubeboot-bootstrap.service on "+m.Name, func(out string) bool {
		if out == "failed" {
			t.Fatalf("kubeboot-bootstrap.service failed on %s", m.Name)
		}
		return out == "active"
	}, "sh", "-c", "systemctl is-active kubeboot-bootstrap || true")
}

// TestMachines: nodes that are machines, whose containerd and kubelet are
// systemd services as a distribution installs them, come up unattended
// from one file each through kubeboot's bootstrap unit: the control-plane
// node inits, the worker joins by itself; kubeboot runs every phase there
// exactly as on bare metal, kubelet-start included. The kubelet runs from
// kubelet.service with kubeboot's drop-in, as a child of the machine's
// systemd, with QoS cgroups; an in-place resize needs no kubelet restart;
// both nodes come back after a reboot.
func TestMachines(t *testing.T) {
	ctx := context.Background()
	l := newMachineLab(t, "ml", "10.89.240.0/24", "cp1:control-plane", "w1:worker", "w2:worker")
	cpConfig := clusterFile(l)
	l.images(t, cpConfig, nil)
	cp := l.machine(t, 0, cpConfig)
	start := time.Now()
	if err := cp.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	waitBootstrapped(t, cp)
	t.Logf("TIMING: control-plane machine's boot until its bootstrap unit is done: %s", time.Since(start).Round(time.Millisecond))
	if journal := inMachine(t, cp, "journalctl", "--no-pager", "-u", "kubeboot-bootstrap"); strings.Contains(journal, strings.Split(fleetToken, ".")[1]) {
		t.Error("the bootstrap unit's journal holds the bootstrap token's secret")
	}
	kubectl := []string{"kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf"}

	t.Run("kubelet-start wrote the drop-in and systemd runs the kubelet with it", func(t *testing.T) {
		dropIns := inMachine(t, cp, "systemctl", "show", "kubelet", "-p", "DropInPaths", "--value")
		if !strings.Contains(dropIns, "/etc/systemd/system/kubelet.service.d/20-kubeboot.conf") {
			t.Errorf("kubelet.service's drop-ins: %q", dropIns)
		}
		pid := inMachine(t, cp, "systemctl", "show", "kubelet", "-p", "MainPID", "--value")
		if pid == "0" || pid == "" {
			t.Fatalf("kubelet.service has no main process")
		}
		if ppid := inMachine(t, cp, "sh", "-c", "awk '{print $4}' /proc/"+pid+"/stat"); ppid != "1" {
			t.Errorf("the kubelet's parent is %s, want the machine's PID 1", ppid)
		}
		if exe := inMachine(t, cp, "readlink", "/proc/"+pid+"/exe"); exe != "/usr/bin/kubelet" {
			t.Errorf("kubelet.service runs %s", exe)
		}
	})
	t.Run("the kubelet runs the pods in QoS cgroups", func(t *testing.T) {
		// The API server's static pod requests CPU: a Burstable pod.
		cgroup := inMachine(t, cp, "sh", "-c", "cat /proc/$(pgrep -o kube-apiserver)/cgroup")
		if !strings.Contains(cgroup, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod") {
			t.Errorf("the API server's cgroups: %s", cgroup)
		}
	})
	t.Run("an in-place resize is applied without a kubelet restart", func(t *testing.T) {
		// The conformance suite's resize tests crashed the lab's kubelet
		// when it ran without QoS cgroups (cgroupsPerQOS: false).
		kubelet := inMachine(t, cp, "systemctl", "show", "kubelet", "-p", "MainPID", "--value")
		writeFile(t, filepath.Join(cp.Root(), "root/resize.json"), pausePod("resize", "cp1", true))
		// Until the controller-manager has made the namespace's default
		// service account, the pod is refused.
		waitMachine(t, cp, "the pod to be created", func(string) bool { return true }, append(kubectl, "apply", "-f", "/root/resize.json")...)
		waitMachine(t, cp, "the pod to run", func(string) bool { return true },
			append(kubectl, "wait", "--for=condition=Ready", "pod/resize", "--timeout=5s")...)
		patch := `{"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "200m"}, "limits": {"cpu": "400m"}}}]}}`
		inMachine(t, cp, append(kubectl, "patch", "pod", "resize", "--subresource", "resize", "--patch", patch)...)
		waitMachine(t, cp, "the resize to be applied", func(out string) bool { return out == "200m 400m" },
			append(kubectl, "get", "pod", "resize", "-o", "jsonpath={.status.containerStatuses[0].resources.requests.cpu} {.status.containerStatuses[0].resources.limits.cpu}")...)
		ids := strings.Fields(inMachine(t, cp, append(kubectl, "get", "pod", "resize", "-o", "jsonpath={.metadata.uid} {.status.containerStatuses[0].containerID}")...))
		if len(ids) != 2 {
			t.Fatalf("the pod's uid and container id: %q", ids)
		}
		scope := fmt.Sprintf("/sys/fs/cgroup/cpu/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/cri-containerd-%s.scope/",
			strings.ReplaceAll(ids[0], "-", "_"), strings.TrimPrefix(ids[1], "containerd://"))
		// 200m of CPU is 204 cpu.shares, a 400m limit 40000µs of each
		// 100000µs period: the container's own cgroup (cgroup v1).
		if got := strings.Fields(inMachine(t, cp, "cat", scope+"cpu.shares", scope+"cpu.cfs_quota_us")); len(got) != 2 || got[0] != "204" || got[1] != "40000" {
			t.Errorf("the resized container's cpu.shares and cpu.cfs_quota_us: %q, want 204 and 40000", got)
		}
		if after := inMachine(t, cp, "systemctl", "show", "kubelet", "-p", "MainPID", "--value"); after != kubelet {
			t.Errorf("the kubelet restarted during the resize (pid %s, then %s)", kubelet, after)
		}
		inMachine(t, cp, append(kubectl, "delete", "pod", "resize", "--wait=false")...)
	})

	hash := caHash(t, cp)
	w1 := l.machine(t, 1, workerFile(l, hash))
	t.Run("a worker given only its file joins by itself at boot", func(t *testing.T) {
		start := time.Now()
		if err := w1.Boot(ctx); err != nil {
			t.Fatal(err)
		}
		waitBootstrapped(t, w1)
		t.Logf("TIMING: worker machine's boot until it has joined: %s", time.Since(start).Round(time.Millisecond))
		if got := inMachine(t, cp, append(kubectl, "get", "node", "w1", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)...); got != "True" {
			t.Errorf("Node w1 Ready: %q", got)
		}
		writeFile(t, filepath.Join(cp.Root(), "root/w1.json"), pausePod("on-w1", "w1", false))
		inMachine(t, cp, append(kubectl, "apply", "-f", "/root/w1.json")...)
		waitMachine(t, cp, "the pod on w1 to run", func(string) bool { return true },
			append(kubectl, "wait", "--for=condition=Ready", "pod/on-w1", "--timeout=5s")...)
	})
	t.Run("kubeadm join starts a node's kubelet through systemd too", func(t *testing.T) {
		w2 := l.machine(t, 2, "")
		if err := w2.Boot(ctx); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		// A booted machine may still be starting containerd, which
		// kubeadm's preflight needs, as an operator's shell would wait for.
		waitMachine(t, w2, "containerd active", func(out string) bool { return strings.TrimSpace(out) == "active" },
			"sh", "-c", "systemctl is-active containerd || true")
		var out strings.Builder
		// This host's cgroups are v1 and it may have swap (the cluster's
		// kubelet-config accepts both), and a node's network namespace has
		// no bridge netfilter setting of its own.
		if err := w2.Run(ctx, nil, &out, &out, "kubeadm", "join", l.cl.Address(0).String()+":6443", "--token", fleetToken,
			"--discovery-token-ca-cert-hash", hash, "--node-name", "w2",
			"--ignore-preflight-errors", "SystemVerification,Swap,FileContent--proc-sys-net-bridge-bridge-nf-call-iptables"); err != nil {
			t.Fatalf("kubeadm join: %v\n%s", err, out.String())
		}
		t.Logf("TIMING: kubeadm join: %s", time.Since(start).Round(time.Millisecond))
		dropIns := inMachine(t, w2, "systemctl", "show", "kubelet", "-p", "DropInPaths", "--value")
		if !strings.Contains(dropIns, "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf") {
			t.Errorf("kubelet.service's drop-ins: %q", dropIns)
		}
		pid := inMachine(t, w2, "systemctl", "show", "kubelet", "-p", "MainPID", "--value")
		if ppid := inMachine(t, w2, "sh", "-c", "awk '{print $4}' /proc/"+pid+"/stat"); ppid != "1" {
			t.Errorf("the kubelet's parent is %s, want the machine's PID 1", ppid)
		}
		if args := inMachine(t, w2, "cat", "/proc/"+pid+"/cmdline"); !strings.Contains(args, "--kubeconfig=/etc/kubernetes/kubelet.conf") {
			t.Errorf("the kubelet runs without kubeadm's flags: %q", args)
		}
		waitMachine(t, cp, "Node w2 to be Ready", func(out string) bool { return out == "True" },
			append(kubectl, "get", "node", "w2", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)...)
	})
	t.Run("after a reboot, the worker is Ready with its pod running again", func(t *testing.T) {
		container := `jsonpath={.status.containerStatuses[0].containerID} {.status.containerStatuses[0].state.running.startedAt}`
		before := inMachine(t, cp, append(kubectl, "get", "pod", "on-w1", "-o", container)...)
		rebooted := time.Now()
		if err := w1.Reboot(ctx, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		// After the reboot, the kubelet runs the pod in a new container.
		waitMachine(t, cp, "the pod on w1 to run in a new container", func(out string) bool {
			f := strings.Fields(out)
			return len(f) == 2 && f[0] != strings.Fields(before)[0]
		}, append(kubectl, "get", "pod", "on-w1", "-o", container)...)
		t.Logf("TIMING: worker's reboot until its pod runs again: %s", time.Since(rebooted).Round(time.Millisecond))
		if got := inMachine(t, cp, append(kubectl, "get", "node", "w1", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)...); got != "True" {
			t.Errorf("Node w1 Ready: %q", got)
		}
		if got := inMachine(t, w1, "systemctl", "is-active", "kubeboot-bootstrap"); got != "active" {
			t.Errorf("the bootstrap unit after the reboot: %s", got)
		}
		// At a later boot the worker has joined: no discovery, no token.
		if journal := inMachine(t, w1, "journalctl", "--no-pager", "-b", "-u", "kubeboot-bootstrap"); !strings.Contains(journal, "this node has joined its cluster") {
			t.Errorf("the bootstrap unit's journal after the reboot:\n%s", journal)
		}
	})
	t.Run("after a reboot, the control plane answers with a healthy etcd", func(t *testing.T) {
		start := time.Now()
		if err := cp.Reboot(ctx, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		waitMachine(t, cp, "etcd to be ready after the reboot", func(out string) bool { return out == "ok" },
			append(kubectl, "get", "--raw", "/readyz/etcd")...)
		waitMachine(t, cp, "the API server to be ready after the reboot", func(out string) bool { return out == "ok" },
			append(kubectl, "get", "--raw", "/readyz")...)
		t.Logf("TIMING: control plane's reboot until the API server is ready: %s", time.Since(start).Round(time.Millisecond))
		for _, unit := range []string{"containerd", "kubelet"} {
			if got := inMachine(t, cp, "systemctl", "is-active", unit); got != "active" {
				t.Errorf("%s after the reboot: %s", unit, got)
			}
		}
		// At every boot, init runs again, converges and changes nothing.
		waitBootstrapped(t, cp)
		if journal := inMachine(t, cp, "journalctl", "--no-pager", "-b", "-u", "kubeboot-bootstrap"); !strings.Contains(journal, `"ok":true`) {
			t.Errorf("the bootstrap unit's journal after the reboot:\n%s", journal)
		}
	})
	t.Run("nothing of the nodes is on the host", func(t *testing.T) {
		for _, path := range []string{"/etc/kubernetes/admin.conf", "/var/lib/kubelet/config.yaml", phasesDropInOnHost} {
			if _, err := os.Stat(path); err == nil {
				t.Errorf("%s is on the host", path)
			}
		}
		if _, err := os.Stat(filepath.Join(cp.Root(), "etc/kubernetes/admin.conf")); err != nil {
			t.Errorf("admin.conf is not in the machine's /etc: %v", err)
		}
	})
}

// pausePod is a pod of the sandbox image on node, which tolerates every
// taint; with hostNetwork, it needs no pod network.
func pausePod(name, node string, hostNetwork bool) string {
	return fmt.Sprintf(`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": %q, "namespace": "default"},
  "spec": {"nodeName": %q, "hostNetwork": %t, "tolerations": [{"operator": "Exists"}],
    "containers": [{"name": "c", "image": %q,
      "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}}}]}}`, name, node, hostNetwork, lab.SandboxImage)
}

// phasesDropInOnHost is where kubelet-start's drop-in would be on the host.
const phasesDropInOnHost = "/etc/systemd/system/kubelet.service.d/20-kubeboot.conf"

// waitMachine runs a command in the machine until it succeeds with an
// output that done accepts, for up to two minutes.
func waitMachine(t *testing.T, m machine.Machine, what string, done func(string) bool, argv ...string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := m.Output(ctx, argv...)
		last = strings.TrimSpace(string(out))
		if err != nil {
			last = err.Error()
			return false, nil
		}
		return done(last), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %s", what, last)
	}
}

// inMachine runs a command in the machine and returns its trimmed stdout.
func inMachine(t *testing.T, m machine.Machine, argv ...string) string {
	t.Helper()
	out, err := m.Output(context.Background(), argv...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
