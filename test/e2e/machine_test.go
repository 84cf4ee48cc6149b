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
)

// The units of a machine node, as the distributions' packages of
// containerd and the kubelet install them in /usr/lib/systemd/system.
const (
	containerdUnit = `[Unit]
Description=containerd container runtime
After=network.target local-fs.target

[Service]
ExecStart=/usr/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity

[Install]
WantedBy=multi-user.target
`
	kubeletUnit = `[Unit]
Description=kubelet: The Kubernetes Node Agent
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
`
	// restrict_oom_score_adj: this host forbids lowering a process's
	// oom_score_adj, which runc otherwise does for every sandbox.
	machineContainerdConfig = `version = 3
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  SystemdCgroup = true
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = '` + lab.SandboxImage + `'
`
)

// usrLayer lays out what the machine's packages would install in /usr:
// the binaries in bin/ and the units in lib/systemd/system/.
func usrLayer(t *testing.T, dir string) string {
	t.Helper()
	layer := filepath.Join(dir, "usr")
	for _, d := range []string{"bin", "lib/systemd/system"} {
		if err := os.MkdirAll(filepath.Join(layer, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, src := range map[string]string{
		"kubelet": filepath.Join(binDir, "kubelet"), "containerd": filepath.Join(binDir, "containerd"),
		"containerd-shim-runc-v2": filepath.Join(binDir, "containerd-shim-runc-v2"), "ctr": filepath.Join(binDir, "ctr"),
		"kubectl": filepath.Join(binDir, "kubectl"), "kubeboot": kubebootBin,
	} {
		if err := os.Link(src, filepath.Join(layer, "bin", name)); err != nil {
			copyFile(t, src, filepath.Join(layer, "bin", name))
		}
	}
	writeFile(t, filepath.Join(layer, "lib/systemd/system/containerd.service"), containerdUnit)
	writeFile(t, filepath.Join(layer, "lib/systemd/system/kubelet.service"), kubeletUnit)
	return layer
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// machineImages builds the archive of the images the node's configuration
// names, and the sandbox image.
func machineImages(t *testing.T, cfgPath, cacheDir string) string {
	t.Helper()
	r := runCommand(t, kubebootBin, "images", "list", "--config", cfgPath)
	if r.code != 0 {
		t.Fatalf("images list exited %d: %s", r.code, r.stderr)
	}
	var images []lab.Image
	for _, ref := range append(strings.Fields(r.stdout), lab.SandboxImage) {
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
	archive, err := lab.Archive(cacheDir, images)
	if err != nil {
		t.Fatal(err)
	}
	return archive
}

// TestMachineInit: on a machine whose containerd and kubelet are systemd
// services, as a distribution installs them, `kubeboot init` runs every
// phase, kubelet-start included, exactly as on bare metal: the kubelet
// runs from kubelet.service with kubeboot's drop-in, as a child of the
// machine's systemd, with QoS cgroups, and the control plane is healthy.
func TestMachineInit(t *testing.T) {
	ctx := context.Background()
	root, err := os.MkdirTemp("", "kb-mi-")
	if err != nil {
		t.Fatal(err)
	}
	desc := filepath.Join(root, "cluster.yaml")
	writeFile(t, desc, "apiVersion: kubeboot.io/v1alpha1\nkind: LabCluster\nname: mi\ndir: "+filepath.Join(root, "c")+
		"\nsubnet: 10.89.240.0/24\npodSubnet: 10.245.0.0/16\nnodes: [{name: cp1, role: control-plane}]\n")
	cl, err := lab.LoadCluster(desc)
	if err != nil {
		t.Fatal(err)
	}
	before := hostNetworkState(t)
	m := machine.Machine{Name: "cp1", Dir: filepath.Join(root, "m"), NetNS: filepath.Join("/run/netns", cl.Netns("cp1"))}
	t.Cleanup(func() {
		if t.Failed() {
			if out, err := m.Output(ctx, "journalctl", "--no-pager", "-n", "60", "-u", "kubelet", "-u", "containerd"); err == nil {
				t.Logf("the machine's journal:\n%s", out)
			}
		}
		if err := m.Remove(20 * time.Second); err != nil {
			t.Error(err)
		}
		if err := cl.TearDownNetwork(ctx); err != nil {
			t.Error(err)
		}
		after := hostNetworkState(t)
		if !slices.Equal(before.namespaces, after.namespaces) || !slices.Equal(before.links, after.links) {
			t.Errorf("the host's network differs after the machine is removed:\nbefore %v %v\nafter  %v %v", before.namespaces, before.links, after.namespaces, after.links)
		}
		if left := processesUnder(root); len(left) > 0 {
			t.Errorf("processes of the machine remain:\n%s", describe(left))
		}
		if !t.Failed() {
			_ = os.RemoveAll(root)
		}
	})
	if err := cl.SetUpNetwork(ctx); err != nil {
		t.Fatal(err)
	}

	address := cl.Address(0).String()
	cfg := fmt.Sprintf(`apiVersion: kubeboot.io/v1alpha1
kind: ClusterConfiguration
clusterName: mi
node:
  name: cp1
  advertiseAddress: %s
networking:
  podSubnet: 10.245.0.0/16
kubelet:
  containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
  extraConfig:
    # This host's cgroups are v1, and it may have swap.
    failCgroupV1: false
    failSwapOn: false
    evictionHard: {imagefs.available: "0%%", nodefs.available: "0%%", nodefs.inodesFree: "0%%"}
    imageGCHighThresholdPercent: 100
addons:
  coreDNS:
    disabled: true
  kubeProxy:
    disabled: true
`, address)
	cfgPath := filepath.Join(root, "node.yaml")
	writeFile(t, cfgPath, cfg)
	archive := machineImages(t, cfgPath, filepath.Join(root, "images"))

	m.UsrLayers = []string{usrLayer(t, root)}
	m.Binds = []string{archive + ":/opt/kubeboot/images.tar", filepath.Join(binDir, "cni") + ":/opt/cni/bin"}
	if err := m.Prepare(); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(m.Root(), "etc/containerd/config.toml"), machineContainerdConfig)
	writeFile(t, filepath.Join(m.Root(), "etc/kubeboot/node.yaml"), cfg)
	for _, unit := range []string{"containerd.service", "kubelet.service"} {
		link := filepath.Join(m.Root(), "etc/systemd/system/multi-user.target.wants", unit)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/usr/lib/systemd/system/"+unit, link); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if err := m.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING: boot: %s", time.Since(start).Round(time.Millisecond))
	if out, err := m.Output(ctx, "ctr", "-n", "k8s.io", "images", "import", "/opt/kubeboot/images.tar"); err != nil {
		t.Fatalf("import the images: %v\n%s", err, out)
	}

	start = time.Now()
	var stdout, stderr strings.Builder
	if err := m.Run(ctx, nil, &stdout, &stderr, "kubeboot", "init", "--config", "/etc/kubeboot/node.yaml"); err != nil {
		t.Fatalf("kubeboot init in the machine: %v\n%s", err, stderr.String())
	}
	t.Logf("TIMING: init in the machine: %s", time.Since(start).Round(time.Millisecond))

	t.Run("kubelet-start wrote the drop-in and systemd runs the kubelet with it", func(t *testing.T) {
		dropIns := inMachine(t, m, "systemctl", "show", "kubelet", "-p", "DropInPaths", "--value")
		if !strings.Contains(dropIns, "/etc/systemd/system/kubelet.service.d/20-kubeboot.conf") {
			t.Errorf("kubelet.service's drop-ins: %q", dropIns)
		}
		pid := inMachine(t, m, "systemctl", "show", "kubelet", "-p", "MainPID", "--value")
		if pid == "0" || pid == "" {
			t.Fatalf("kubelet.service has no main process")
		}
		ppid := inMachine(t, m, "sh", "-c", "awk '{print $4}' /proc/"+pid+"/stat")
		if ppid != "1" {
			t.Errorf("the kubelet's parent is %s, want the machine's PID 1", ppid)
		}
		if exe := inMachine(t, m, "readlink", "/proc/"+pid+"/exe"); exe != "/usr/bin/kubelet" {
			t.Errorf("kubelet.service runs %s", exe)
		}
	})
	t.Run("the kubelet runs the pods in QoS cgroups", func(t *testing.T) {
		slices := inMachine(t, m, "sh", "-c", "ls -d /sys/fs/cgroup/*/kubepods.slice/kubepods-burstable.slice 2>/dev/null || ls -d /sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice")
		if slices == "" {
			t.Error("no kubepods-burstable.slice in the machine's cgroups")
		}
		// The API server's static pod requests CPU: a Burstable pod.
		cgroup := inMachine(t, m, "sh", "-c", "cat /proc/$(pgrep -o kube-apiserver)/cgroup")
		if !strings.Contains(cgroup, "kubepods-burstable") {
			t.Errorf("the API server's cgroups: %s", cgroup)
		}
	})
	t.Run("the control plane answers", func(t *testing.T) {
		if got := inMachine(t, m, "kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", "get", "--raw", "/readyz"); got != "ok" {
			t.Errorf("readyz: %q", got)
		}
	})
	t.Run("an in-place resize is applied without a kubelet restart", func(t *testing.T) {
		// The conformance suite's resize tests crashed the lab's kubelet
		// when it ran without QoS cgroups (cgroupsPerQOS: false).
		kubelet := inMachine(t, m, "systemctl", "show", "kubelet", "-p", "MainPID", "--value")
		pod := `{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "resize", "namespace": "default"},
  "spec": {"nodeName": "cp1", "hostNetwork": true, "tolerations": [{"operator": "Exists"}],
    "containers": [{"name": "c", "image": "` + lab.SandboxImage + `",
      "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}}}]}}`
		kubectl := []string{"kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf"}
		writeFile(t, filepath.Join(m.Root(), "root/resize.json"), pod)
		// Until the controller-manager has made the namespace's default
		// service account, the pod is refused.
		waitMachine(t, m, "the pod to be created", func(string) bool { return true },
			append(kubectl, "apply", "-f", "/root/resize.json")...)
		waitMachine(t, m, "the pod to run", func(string) bool { return true },
			append(kubectl, "wait", "--for=condition=Ready", "pod/resize", "--timeout=5s")...)
		patch := `{"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "200m"}, "limits": {"cpu": "400m"}}}]}}`
		inMachine(t, m, append(kubectl, "patch", "pod", "resize", "--subresource", "resize", "--patch", patch)...)
		waitMachine(t, m, "the resize to be applied", func(out string) bool { return out == "200m 400m" },
			append(kubectl, "get", "pod", "resize", "-o", "jsonpath={.status.containerStatuses[0].resources.requests.cpu} {.status.containerStatuses[0].resources.limits.cpu}")...)
		ids := strings.Fields(inMachine(t, m, append(kubectl, "get", "pod", "resize", "-o", "jsonpath={.metadata.uid} {.status.containerStatuses[0].containerID}")...))
		if len(ids) != 2 {
			t.Fatalf("the pod's uid and container id: %q", ids)
		}
		scope := fmt.Sprintf("/sys/fs/cgroup/cpu/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/cri-containerd-%s.scope/",
			strings.ReplaceAll(ids[0], "-", "_"), strings.TrimPrefix(ids[1], "containerd://"))
		// 200m of CPU is 204 cpu.shares, a 400m limit 40000µs of each
		// 100000µs period: the container's own cgroup (cgroup v1).
		if got := inMachine(t, m, "cat", scope+"cpu.shares", scope+"cpu.cfs_quota_us"); strings.Fields(got)[0] != "204" || strings.Fields(got)[1] != "40000" {
			t.Errorf("the resized container's cpu.shares and cpu.cfs_quota_us: %q, want 204 and 40000", got)
		}
		if after := inMachine(t, m, "systemctl", "show", "kubelet", "-p", "MainPID", "--value"); after != kubelet {
			t.Errorf("the kubelet restarted during the resize (pid %s, then %s)", kubelet, after)
		}
		inMachine(t, m, append(kubectl, "delete", "pod", "resize", "--wait=false")...)
	})
	t.Run("after a reboot, systemd starts containerd and the kubelet, and the control plane comes back", func(t *testing.T) {
		before := inMachine(t, m, "systemctl", "show", "kubelet", "-p", "ExecMainStartTimestampMonotonic", "--value")
		start := time.Now()
		if err := m.PowerOff(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		t.Logf("TIMING: power off: %s", time.Since(start).Round(time.Millisecond))
		if err := m.Boot(ctx); err != nil {
			t.Fatal(err)
		}
		var last string
		err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			out, err := m.Output(ctx, "kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", "get", "--raw", "/readyz")
			last = strings.TrimSpace(string(out))
			if err != nil {
				last = err.Error()
			}
			return last == "ok", nil
		})
		if err != nil {
			t.Fatalf("the API server is not ready %s after the reboot: %s", time.Since(start).Round(time.Second), last)
		}
		t.Logf("TIMING: reboot until the API server is ready: %s", time.Since(start).Round(time.Millisecond))
		for _, unit := range []string{"containerd", "kubelet"} {
			if got := inMachine(t, m, "systemctl", "is-active", unit); got != "active" {
				t.Errorf("%s after the reboot: %s", unit, got)
			}
		}
		if after := inMachine(t, m, "systemctl", "show", "kubelet", "-p", "ExecMainStartTimestampMonotonic", "--value"); after == before {
			t.Errorf("the kubelet did not start again (started at %s before and after)", after)
		}
	})
	t.Run("nothing of the node is on the host", func(t *testing.T) {
		for _, path := range []string{"/etc/kubernetes/admin.conf", "/var/lib/kubelet/config.yaml", phasesDropInOnHost} {
			if _, err := os.Stat(path); err == nil {
				t.Errorf("%s is on the host", path)
			}
		}
		if _, err := os.Stat(filepath.Join(m.Root(), "etc/kubernetes/admin.conf")); err != nil {
			t.Errorf("admin.conf is not in the machine's /etc: %v", err)
		}
	})
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
