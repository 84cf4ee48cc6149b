//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubeboot/kubeboot/internal/bootstrap"
	"github.com/kubeboot/kubeboot/internal/lab"
	"github.com/kubeboot/kubeboot/internal/machine"
	"github.com/kubeboot/kubeboot/internal/testsupport"
	"github.com/kubeboot/kubeboot/pki"
)

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

// bootLab is a lab of machines that lab.Lab's Boot brings up,
// as `lab up` would but with each node given the file the test chooses,
// or none: the test then brings the nodes up itself.
type bootLab struct {
	lab.Lab
	// root holds the lab's description and its dir (root/c).
	root string
}

// newBootLab writes the description of a lab of nodes (a YAML list,
// then any more of the description's fields, as startCluster takes them)
// on subnet and podSubnet. Nothing is set up before boot.
func newBootLab(t *testing.T, name, subnet, podSubnet, nodes string) *bootLab {
	t.Helper()
	root, desc := writeLabDescription(t, name, subnet, podSubnet, nodes)
	cl, err := lab.LoadCluster(desc)
	if err != nil {
		t.Fatal(err)
	}
	return &bootLab{Lab: lab.Lab{Cluster: cl, BinDir: binDir, Kubeboot: kubebootBin, Package: kubebootDeb, Registry: lab.DefaultRegistry}, root: root}
}

// boot brings the lab up with in (lab.Lab.Boot) and registers the
// cleanup that brings it down (logging the machines' journals first when
// the test failed) and checks that nothing of it is left on the host. A
// lab that Boot refused is another's, up on this host: the cleanup leaves
// it alone.
func (l *bootLab) boot(t *testing.T, in lab.Inputs) {
	t.Helper()
	ctx := context.Background()
	name := l.Cluster.Name
	before := hostNetworkState(t, name)
	hostBefore := nodeFiles()
	err := l.Boot(ctx, in)
	if _, refused := errors.AsType[*lab.InputError](err); refused {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logJournals(t, l.Lab)
		}
		if err := l.Down(ctx); err != nil {
			t.Error(err)
		}
		after := hostNetworkState(t, name)
		if !slices.Equal(before.namespaces, after.namespaces) || !slices.Equal(before.links, after.links) {
			t.Errorf("the host's network differs after the machines are removed:\nbefore %v %v\nafter  %v %v", before.namespaces, before.links, after.namespaces, after.links)
		}
		if left := processesUnder(l.root); len(left) > 0 {
			t.Errorf("processes of the machines remain:\n%s", describe(left))
		}
		if hostAfter := nodeFiles(); !slices.Equal(hostBefore, hostAfter) {
			t.Errorf("the host's node files differ:\nbefore %q\nafter  %q", hostBefore, hostAfter)
		}
		if !t.Failed() {
			_ = os.RemoveAll(l.root)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// machine is the named node's machine.
func (l *bootLab) machine(t *testing.T, name string) machine.Machine {
	t.Helper()
	m, err := l.Machine(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// logJournals logs the end of each node's journal of its bootstrap unit
// and kubelet, for a test that failed.
func logJournals(t *testing.T, l lab.Lab) {
	t.Helper()
	for _, n := range l.Cluster.Nodes {
		if m, err := l.Machine(n.Name); err == nil {
			if out, err := m.Output(context.Background(), "journalctl", "--no-pager", "-n", "40", "-u", "kubeboot-bootstrap", "-u", "kubelet"); err == nil {
				t.Logf("the journal of %s:\n%s", n.Name, out)
			}
		}
	}
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

// machineCluster is a lab of machines that `kubeboot lab up --cluster`
// brings up from its description.
type machineCluster struct {
	*labCluster
	lab lab.Lab
}

// startMachineCluster writes the description of a lab of machines (the
// nodes a YAML list, as startCluster takes them) and registers the
// cleanup that brings it down with `lab down --cluster` and checks that
// nothing of it is left on the host: startCluster's checks, and nothing
// in the host's node dirs (nodeFiles). On a failure, the
// nodes' journals are logged first. The test runs lab up itself.
func startMachineCluster(t *testing.T, name, subnet, podSubnet, nodes string) *machineCluster {
	t.Helper()
	hostBefore := nodeFiles()
	t.Cleanup(func() {
		if hostAfter := nodeFiles(); !slices.Equal(hostBefore, hostAfter) {
			t.Errorf("after lab down, the host's node files differ:\nbefore %q\nafter  %q", hostBefore, hostAfter)
		}
	})
	c := &machineCluster{labCluster: startCluster(t, name, subnet, podSubnet, nodes)}
	cl, err := lab.LoadCluster(c.desc)
	if err != nil {
		t.Fatal(err)
	}
	c.lab = lab.Lab{Cluster: cl, BinDir: binDir, Kubeboot: kubebootBin}
	t.Cleanup(func() {
		if t.Failed() {
			logJournals(t, c.lab)
		}
	})
	return c
}

// machine is the named node's machine.
func (c *machineCluster) machine(t *testing.T, name string) machine.Machine {
	t.Helper()
	m, err := c.lab.Machine(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// exec runs `kubeboot lab exec NODE -- argv` and returns its trimmed
// stdout.
func (c *machineCluster) exec(t *testing.T, node string, argv ...string) string {
	t.Helper()
	r := runCommand(t, kubebootBin, append([]string{"lab", "exec", "--cluster", c.desc, node, "--"}, argv...)...)
	if r.code != 0 {
		t.Fatalf("lab exec %s -- %s: exit %d: %s", node, strings.Join(argv, " "), r.code, r.stderr)
	}
	return strings.TrimSpace(r.stdout)
}

// TestMachines: `kubeboot lab up --cluster` brings up a lab whose nodes
// are machines, whose containerd and kubelet are systemd services as a
// distribution installs them: every node's file is written before any
// boots and all boot at once; the control-plane node inits and a worker
// (w1) joins by themselves through kubeboot's bootstrap unit (a token and
// the CA's hash), and another worker (w2) joins with the real kubeadm join
// v1.36.3; the lab reports each node's progress from its unit's events.
// kubeboot runs every phase there exactly as on bare metal, kubelet-start
// included: the kubelet runs from kubelet.service with kubelet-start's
// drop-in (or kubeadm's), as a child of the machine's systemd, with QoS
// cgroups; an in-place resize needs no kubelet restart. What a cluster with
// workers must do: every Node Ready, only the control plane marked; each
// worker's kubelet serving certificate approved by kubeboot's CSR approver,
// so that logs and exec reach its pods through the API server, which
// verifies it; forged serving CSRs denied; kubeadm's own commands reading
// the cluster on its control plane; a Deployment of agnhost with a Service
// and a claim of the default StorageClass works as `lab up` left the lab.
// `lab reboot` brings a worker and the
// control plane back; a worker reset, after which a join is refused, with
// nothing written, for an expired or deleted token, a wrong CA hash, an
// unreachable endpoint and the name of a Ready Node, joins again by its
// own file; `lab exec` runs commands in a node, `lab load` puts an image
// archive into the nodes named, `lab export logs` collects the nodes'
// journals, pods' logs and the cluster's dumps; and `lab down` leaves
// nothing.
func TestMachines(t *testing.T) {
	alongside(t)
	c := startMachineCluster(t, "ml", "10.89.8.0/24", "10.246.0.0/16", `
- {name: cp1, role: control-plane}
- {name: w1, role: worker}
- {name: w2, role: worker, join: kubeadm}
`)
	r := runCommand(t, kubebootBin, "lab", "up", "--cluster", c.desc, "--bin-dir", binDir, "--package", kubebootDeb, "-o", "json")
	if r.code != 0 {
		t.Fatalf("lab up --cluster exited %d:\n%s\n%s", r.code, r.stderr, testsupport.LastLines(r.stdout, 40))
	}
	t.Logf("TIMING: lab up --cluster of three machines (all booted at once, addons rolled out): %s", r.took.Round(time.Millisecond))
	cp := c.machine(t, "cp1")
	kubectl := []string{"kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf"}

	t.Run("the lab reports each node's progress from its bootstrap unit", func(t *testing.T) {
		var res struct {
			Result lab.Result `json:"result"`
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil || !res.Result.OK || len(res.Result.Nodes) != 3 {
			t.Fatalf("lab up's result: %v: %s", err, lines[len(lines)-1])
		}
		phases := map[string]bool{}
		for _, line := range lines {
			var e struct{ Phase, Msg string }
			if json.Unmarshal([]byte(line), &e) == nil && e.Phase != "" {
				phases[e.Phase] = true
				if strings.HasSuffix(e.Phase, "/lab") && strings.HasPrefix(e.Msg, "up in ") {
					phases[e.Phase+": up"] = true
				}
			}
		}
		for _, want := range []string{"cp1/kubelet-start", "cp1/addon/coredns", "w1/kubelet-start", "cp1/lab: up", "w1/lab: up", "w2/lab: up"} {
			if !phases[want] {
				t.Errorf("lab up's events hold no %q; they have %v", want, slices.Sorted(maps.Keys(phases)))
			}
		}
		out, err := exec.Command("kubectl", "--kubeconfig", res.Result.Kubeconfig, "get", "nodes", "-o", "name").CombinedOutput()
		if err != nil || strings.Fields(string(out))[0] != "node/cp1" || len(strings.Fields(string(out))) != 3 {
			t.Errorf("kubectl on the host through the lab's kubeconfig: %v: %s", err, out)
		}
	})
	t.Run("kubelet-start wrote the drop-in and systemd runs the kubelet with it", func(t *testing.T) {
		dropIns := c.exec(t, "cp1", "systemctl", "show", "kubelet", "-p", "DropInPaths", "--value")
		if !strings.Contains(dropIns, "/etc/systemd/system/kubelet.service.d/20-kubeboot.conf") {
			t.Errorf("kubelet.service's drop-ins: %q", dropIns)
		}
		pid := c.exec(t, "cp1", "systemctl", "show", "kubelet", "-p", "MainPID", "--value")
		if pid == "0" || pid == "" {
			t.Fatalf("kubelet.service has no main process")
		}
		if ppid := c.exec(t, "cp1", "sh", "-c", "awk '{print $4}' /proc/"+pid+"/stat"); ppid != "1" {
			t.Errorf("the kubelet's parent is %s, want the machine's PID 1", ppid)
		}
		if exe := c.exec(t, "cp1", "readlink", "/proc/"+pid+"/exe"); exe != "/usr/bin/kubelet" {
			t.Errorf("kubelet.service runs %s", exe)
		}
		// The token lab up drew is in the node's file, never in its journal.
		token := regexp.MustCompile(`token: [a-z0-9]{6}\.([a-z0-9]{16})`).FindStringSubmatch(string(readFile(t, filepath.Join(cp.Root(), bootstrap.ConfigPath))))
		if token == nil {
			t.Fatal("cp1's file holds no bootstrap token")
		}
		if journal := c.exec(t, "cp1", "journalctl", "--no-pager", "-u", "kubeboot-bootstrap"); strings.Contains(journal, token[1]) {
			t.Error("the bootstrap unit's journal holds the bootstrap token's secret")
		}
	})
	t.Run("every node runs kubeboot from its package, and only images registries serve", func(t *testing.T) {
		for _, node := range []string{"cp1", "w1", "w2"} {
			if status := c.exec(t, node, "dpkg-query", "-W", "-f=${Status} ${Version}", "kubeboot"); status != "install ok installed 0.0.0~e2e-1" {
				t.Errorf("%s: dpkg says of kubeboot: %q", node, status)
			}
			if owner := c.exec(t, node, "dpkg", "-S", "/usr/bin/kubeboot"); owner != "kubeboot: /usr/bin/kubeboot" {
				t.Errorf("%s: /usr/bin/kubeboot belongs to %q", node, owner)
			}
			// Its containerd holds what registries serve, under their names:
			// no image of kubeboot's.
			var images struct {
				Images []struct{ RepoTags []string } `json:"images"`
			}
			if err := json.Unmarshal([]byte(c.exec(t, node, "crictl", "images", "-o", "json")), &images); err != nil || len(images.Images) == 0 {
				t.Fatalf("%s: crictl images: %v", node, err)
			}
			for _, image := range images.Images {
				for _, ref := range image.RepoTags {
					if !strings.HasPrefix(ref, "registry.k8s.io/") && !strings.HasPrefix(ref, "docker.io/") && !strings.HasPrefix(ref, "ghcr.io/flannel-io/") {
						t.Errorf("%s holds %s, which no public registry serves under that name", node, ref)
					}
				}
			}
		}
		// The bootstrap unit kubeboot nodes run is the package's, which the
		// node's first boot enabled; the kubeadm node's is not enabled.
		for node, enabled := range map[string]string{"cp1": "enabled", "w1": "enabled", "w2": "disabled"} {
			// On Debian, /lib is a link to /usr/lib, which systemd reads too.
			unit := c.exec(t, node, "sh", "-c", "realpath $(systemctl show -P FragmentPath kubeboot-bootstrap)")
			if unit != "/usr/lib/systemd/system/kubeboot-bootstrap.service" {
				t.Errorf("%s: kubeboot-bootstrap.service is %q, want the package's", node, unit)
			}
			if owner := c.exec(t, node, "dpkg", "-S", unit); owner != "kubeboot: "+unit {
				t.Errorf("%s: %s belongs to %q", node, unit, owner)
			}
			if got := c.exec(t, node, "sh", "-c", "systemctl is-enabled kubeboot-bootstrap || true"); got != enabled {
				t.Errorf("%s: kubeboot-bootstrap.service is %q, want %s", node, got, enabled)
			}
		}
		// The CSR approver runs the node's binary in the pause image, and
		// becomes ready: lab up waits for the addons, not for this pod.
		waitMachine(t, cp, "the CSR approver's pod to run /usr/bin/kubeboot ready in the pause image",
			func(pod string) bool { return pod == "registry.k8s.io/pause:3.10.2 /usr/bin/kubeboot true" },
			append(kubectl, "get", "pod", "-n", "kube-system", "kubeboot-csr-approver-cp1", "-o",
				"jsonpath={.spec.containers[0].image} {.spec.containers[0].command[0]} {.status.containerStatuses[0].ready}")...)
	})
	t.Run("images export and import carry a node's images to another node", func(t *testing.T) {
		type bundleResult struct {
			Result struct {
				OK     bool
				Images []struct{ Ref, Digest string }
			}
		}
		last := func(out string) bundleResult {
			var r bundleResult
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil || !r.Result.OK {
				t.Fatalf("result %v: %s", err, lines[len(lines)-1])
			}
			return r
		}
		// cp1's images of its own configuration, from its containerd,
		// onto w1's disk, where w1 imports them.
		start := time.Now()
		exported := last(c.exec(t, "cp1", "kubeboot", "images", "export", "--config", bootstrap.ConfigPath, "--out", "/root/images.tar", "-o", "json"))
		w1 := c.machine(t, "w1")
		if err := os.Rename(filepath.Join(cp.Root(), "root/images.tar"), filepath.Join(w1.Root(), "root/images.tar")); err != nil {
			t.Fatal(err)
		}
		imported := last(c.exec(t, "w1", "kubeboot", "images", "import", "/root/images.tar", "-o", "json"))
		t.Logf("TIMING: export of cp1's %d images and their import into w1: %s", len(exported.Result.Images), time.Since(start).Round(time.Millisecond))
		if len(exported.Result.Images) < 7 || !slices.Equal(exported.Result.Images, imported.Result.Images) {
			t.Errorf("exported %v, imported %v", exported.Result.Images, imported.Result.Images)
		}
		for _, image := range imported.Result.Images {
			if got := c.exec(t, "w1", "ctr", "-n", "k8s.io", "images", "ls", "-q", "name=="+image.Ref); got != image.Ref {
				t.Errorf("w1's containerd: %q, want %s", got, image.Ref)
			}
		}
		c.exec(t, "w1", "rm", "/root/images.tar")
	})
	t.Run("lab exec passes the command's exit code on", func(t *testing.T) {
		r := runCommand(t, kubebootBin, "lab", "exec", "--cluster", c.desc, "w1", "--", "sh", "-c", "hostname; exit 3")
		if r.code != 3 || strings.TrimSpace(r.stdout) != "w1" || r.stderr != "" {
			t.Errorf("lab exec w1 -- sh -c 'hostname; exit 3': exit %d, stdout %q, stderr %q (the command's own, nothing of kubeboot's)", r.code, r.stdout, r.stderr)
		}
		r = runCommand(t, kubebootBin, "lab", "exec", "--cluster", c.desc, "w9", "--", "true")
		if r.code != 2 || !strings.Contains(r.stderr, `no node "w9": its nodes are cp1, w1, w2`) {
			t.Errorf("lab exec of a node not in the lab: exit %d: %s", r.code, r.stderr)
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
	t.Run("a worker given only its file joined by itself at boot", func(t *testing.T) {
		if journal := c.exec(t, "w1", "journalctl", "--no-pager", "-u", "kubeboot-bootstrap"); !strings.Contains(journal, `"ok":true`) {
			t.Errorf("w1's bootstrap unit's journal:\n%s", journal)
		}
		if got := c.exec(t, "w1", "systemctl", "is-active", "kubeboot-bootstrap"); got != "active" {
			t.Errorf("w1's bootstrap unit: %s", got)
		}
		writeFile(t, filepath.Join(cp.Root(), "root/w1.json"), pausePod("on-w1", "w1", false))
		inMachine(t, cp, append(kubectl, "apply", "-f", "/root/w1.json")...)
		waitMachine(t, cp, "the pod on w1 to run", func(string) bool { return true },
			append(kubectl, "wait", "--for=condition=Ready", "pod/on-w1", "--timeout=5s")...)
	})
	t.Run("kubeadm join starts a node's kubelet through systemd too", func(t *testing.T) {
		dropIns := c.exec(t, "w2", "systemctl", "show", "kubelet", "-p", "DropInPaths", "--value")
		if !strings.Contains(dropIns, "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf") {
			t.Errorf("kubelet.service's drop-ins: %q", dropIns)
		}
		pid := c.exec(t, "w2", "systemctl", "show", "kubelet", "-p", "MainPID", "--value")
		if ppid := c.exec(t, "w2", "sh", "-c", "awk '{print $4}' /proc/"+pid+"/stat"); ppid != "1" {
			t.Errorf("the kubelet's parent is %s, want the machine's PID 1", ppid)
		}
		if args := c.exec(t, "w2", "cat", "/proc/"+pid+"/cmdline"); !strings.Contains(args, "--kubeconfig=/etc/kubernetes/kubelet.conf") {
			t.Errorf("the kubelet runs without kubeadm's flags: %q", args)
		}
		// kubeadm join returns once the kubelet has its certificate; the
		// Node turns Ready a moment later.
		waitMachine(t, cp, "Node w2 to be Ready", func(out string) bool { return out == "True" },
			append(kubectl, "get", "node", "w2", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)...)
	})
	nodes := c.readyNodes(t, 3)
	t.Run("only the control plane is marked", func(t *testing.T) {
		for name, n := range nodes {
			_, labelled := n.Labels["node-role.kubernetes.io/control-plane"]
			tainted := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
				return t.Key == "node-role.kubernetes.io/control-plane" && t.Effect == corev1.TaintEffectNoSchedule
			})
			if want := name == "cp1"; labelled != want || tainted != want {
				t.Errorf("node %s: control-plane label %v, taint %v; want %v", name, labelled, tainted, want)
			}
		}
		for i, name := range []string{"cp1", "w1", "w2"} {
			if got, want := internalIP(nodes[name]), fmt.Sprintf("10.89.8.%d", 10+i); got != want {
				t.Errorf("node %s has InternalIP %q, want %s", name, got, want)
			}
		}
	})
	t.Run("the approver approved each worker's serving certificate", func(t *testing.T) {
		var csrs certificatesv1.CertificateSigningRequestList
		if err := c.kubectlJSON(t, &csrs, "get", "csr"); err != nil {
			t.Fatal(err)
		}
		for _, w := range workerNames {
			approved := slices.ContainsFunc(csrs.Items, func(csr certificatesv1.CertificateSigningRequest) bool {
				return csr.Spec.SignerName == certificatesv1.KubeletServingSignerName && csr.Spec.Username == "system:node:"+w &&
					hasCondition(csr, certificatesv1.CertificateApproved, "KubebootNodeServingCertificate") && len(csr.Status.Certificate) > 0
			})
			if !approved {
				t.Errorf("no kubelet-serving CSR of %s approved by kubeboot's approver and issued", w)
			}
		}
	})
	pods := c.runWebPods(t, workerNames)
	t.Run("logs and exec reach each worker's pod through the API server", func(t *testing.T) {
		for _, w := range workerNames {
			if out, err := c.kubectlErr(t, "logs", "web-"+w); err != nil || !strings.Contains(out, "8080") {
				t.Errorf("kubectl logs web-%s: %v: %q", w, err, out)
			}
			other := pods[workerNames[1-slices.Index(workerNames, w)]]
			target := net.JoinHostPort(other.Status.PodIP, "8080")
			if out, err := c.kubectlErr(t, "exec", "web-"+w, "--", "/agnhost", "connect", target, "--timeout=5s"); err != nil {
				t.Errorf("exec in web-%s, connecting to %s on the other worker: %v %s", w, target, err, out)
			}
		}
		manifest := readFile(t, filepath.Join(cp.Root(), "etc/kubernetes/manifests/kube-apiserver.yaml"))
		if !strings.Contains(string(manifest), "--kubelet-certificate-authority=/etc/kubernetes/pki/ca.crt") {
			t.Error("the API server does not verify kubelets against the cluster CA")
		}
	})
	t.Run("a Deployment of agnhost with a Service and a PVC works with no other step", func(t *testing.T) { checkWorkloadWithVolume(t, c) })
	t.Run("lab load puts an image into the nodes named, where pods run it", func(t *testing.T) { checkLabLoad(t, c) })
	t.Run("lab export logs collects the journals, the pods' logs and the cluster's dumps", func(t *testing.T) { checkLabExportLogs(t, c) })
	t.Run("forged serving CSRs are denied", func(t *testing.T) { checkForgedCSRs(t, c) })
	t.Run("kubeadm reads the cluster on its control plane", func(t *testing.T) { checkKubeadmCommands(t, c) })
	t.Run("upgrade plan runs from the host with the lab's kubeconfig", func(t *testing.T) { checkPlanFromHost(t, c) })
	t.Run("after lab reboot, the worker is Ready with its pod running again", func(t *testing.T) {
		container := `jsonpath={.status.containerStatuses[0].containerID} {.status.containerStatuses[0].state.running.startedAt}`
		before := inMachine(t, cp, append(kubectl, "get", "pod", "on-w1", "-o", container)...)
		rebooted := time.Now()
		if r := runCommand(t, kubebootBin, "lab", "reboot", "--cluster", c.desc, "w1"); r.code != 0 {
			t.Fatalf("lab reboot w1: exit %d: %s", r.code, r.stderr)
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
		w1 := c.machine(t, "w1")
		waitBootstrapped(t, w1)
		// At a later boot the worker has joined: no discovery, no token.
		if journal := inMachine(t, w1, "journalctl", "--no-pager", "-b", "-u", "kubeboot-bootstrap"); !strings.Contains(journal, "this node has joined its cluster") {
			t.Errorf("the bootstrap unit's journal after the reboot:\n%s", journal)
		}
	})
	t.Run("after lab reboot, the control plane answers with a healthy etcd", func(t *testing.T) {
		start := time.Now()
		if r := runCommand(t, kubebootBin, "lab", "reboot", "--cluster", c.desc, "cp1"); r.code != 0 {
			t.Fatalf("lab reboot cp1: exit %d: %s", r.code, r.stderr)
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
	t.Run("reset a worker, refuse bad joins and join it again", func(t *testing.T) { checkResetWorker(t, c, "w1") })
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
