package phases_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

// fakeHost is a machine's /proc and /sys as the host checks read them: a
// node that passes every check, which each case then breaks.
type fakeHost struct {
	t    *testing.T
	host phases.Host
}

func newFakeHost(t *testing.T) fakeHost {
	h := fakeHost{t: t, host: phases.Host{Root: t.TempDir()}}
	h.write("/proc/sys/net/ipv4/ip_forward", "1\n")
	h.write("/proc/sys/net/ipv6/conf/default/forwarding", "1\n")
	h.write("/proc/swaps", "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n")
	h.write("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")
	h.write("/proc/sys/kernel/osrelease", "6.1.0-18-amd64\n")
	return h
}

func (h fakeHost) write(path, text string) {
	h.t.Helper()
	full := filepath.Join(h.host.Root, path)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(text), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func (h fakeHost) remove(path string) {
	h.t.Helper()
	if err := os.Remove(filepath.Join(h.host.Root, path)); err != nil {
		h.t.Fatal(err)
	}
}

// runHostChecks runs the host checks of needs on h and returns the failed
// ones' names and errors.
func runHostChecks(t *testing.T, s *phases.Node, h phases.Host, needs phases.NodeNeeds) map[string]string {
	t.Helper()
	failed := map[string]string{}
	for _, c := range phases.HostChecks(s.Run, h, needs) {
		if err := c.Run(context.Background()); err != nil {
			failed[c.Name] = err.Error()
		}
	}
	return failed
}

// TestHostChecks runs each host check on a host where it fails, and the
// whole set on one where all pass.
func TestHostChecks(t *testing.T) {
	state := "active"
	s := phasestest.NewNode(t, t.TempDir(), config.DefaultKubernetesVersion)
	s.System, _ = phasestest.FakeSystemd(&state) // a kubelet on the PATH
	sock := "/run/kb-host-cri.sock"
	phasestest.ServeImages(t, s.Files.HostPath(sock))
	needs := phases.NodeNeeds{IPv4: true, FailSwapOn: true, FailCgroupV1: true, ProxyMode: config.ProxyModeNftables, RuntimeEndpoint: "unix://" + sock}

	if failed := runHostChecks(t, s, newFakeHost(t).host, needs); len(failed) > 0 {
		t.Fatalf("a host that meets every need fails: %v", failed)
	}
	dualStack := needs
	dualStack.IPv6 = true
	noSwapCheck := needs
	noSwapCheck.FailSwapOn = false
	v1Allowed := needs
	v1Allowed.FailCgroupV1 = false
	iptables := needs
	iptables.ProxyMode = config.ProxyModeIPTables
	noRuntime := needs
	noRuntime.RuntimeEndpoint = "unix:///run/kb-none.sock"
	cases := []struct {
		name      string
		needs     phases.NodeNeeds
		breakHost func(h fakeHost)
		// check fails with a message holding want; "" means it passes.
		check, want string
	}{
		{"ip_forward 0", needs, func(h fakeHost) { h.write("/proc/sys/net/ipv4/ip_forward", "0\n") },
			"FileContent--proc-sys-net-ipv4-ip_forward", "is 0, not 1: a node forwards its pods' and Services' packets: set net.ipv4.ip_forward = 1"},
		{"IPv6 forwarding off in a dual-stack cluster", dualStack, func(h fakeHost) { h.write("/proc/sys/net/ipv6/conf/default/forwarding", "0\n") },
			"FileContent--proc-sys-net-ipv6-conf-default-forwarding", "set net.ipv6.conf.default.forwarding = 1"},
		{"IPv6 forwarding off, IPv4 only", needs, func(h fakeHost) { h.write("/proc/sys/net/ipv6/conf/default/forwarding", "0\n") }, "", ""},
		{"swap on", needs, func(h fakeHost) {
			h.write("/proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n/swapfile                               file\t\t1048572\t\t0\t\t-2\n")
		}, "Swap", "swap is on (/swapfile) and the kubelet refuses to start with it: turn it off (`swapoff -a`"},
		{"swap on, failSwapOn false", noSwapCheck, func(h fakeHost) {
			h.write("/proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n/dev/vdb partition 1048572 0 -2\n")
		}, "", ""},
		{"cgroup v1", needs, func(h fakeHost) { h.remove("/sys/fs/cgroup/cgroup.controllers") },
			"CgroupV1", "uses cgroup v1 (/sys/fs/cgroup is not the unified hierarchy) and the kubelet refuses it"},
		{"cgroup v1, failCgroupV1 false", v1Allowed, func(h fakeHost) { h.remove("/sys/fs/cgroup/cgroup.controllers") }, "", ""},
		{"kernel 5.10 with nftables", needs, func(h fakeHost) { h.write("/proc/sys/kernel/osrelease", "5.10.0-28-amd64\n") },
			"KernelVersion", "the kernel is 5.10.0-28-amd64, older than the 5.13 that kube-proxy's nftables mode needs: upgrade the kernel, or set addons.kubeProxy.mode: iptables"},
		{"kernel 5.10 with iptables", iptables, func(h fakeHost) { h.write("/proc/sys/kernel/osrelease", "5.10.0-28-amd64\n") }, "", ""},
		{"kernel 4.14", iptables, func(h fakeHost) { h.write("/proc/sys/kernel/osrelease", "4.14.336\n") },
			"KernelVersion", "older than the 4.19 that Kubernetes supports"},
		{"kernel release unreadable", needs, func(h fakeHost) { h.write("/proc/sys/kernel/osrelease", "linux\n") },
			"KernelVersion", `kernel release "linux" is not major.minor`},
		{"no runtime", noRuntime, func(fakeHost) {}, "CRI", "no container runtime listens there: start the container runtime"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newFakeHost(t)
			c.breakHost(h)
			failed := runHostChecks(t, s, h.host, c.needs)
			if c.check == "" {
				if len(failed) > 0 {
					t.Fatalf("want every check to pass, got %v", failed)
				}
				return
			}
			if len(failed) != 1 || !strings.Contains(failed[c.check], c.want) {
				t.Fatalf("want only %s to fail with %q, got %v", c.check, c.want, failed)
			}
		})
	}
}

// TestKubeletBinaryCheck: a node without a kubelet on the PATH fails
// FileExisting-kubelet.
func TestKubeletBinaryCheck(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	s := phasestest.NewNode(t, t.TempDir(), config.DefaultKubernetesVersion)
	failed := runHostChecks(t, s, newFakeHost(t).host, phases.NodeNeeds{IPv4: true})
	if !strings.Contains(failed["FileExisting-kubelet"], "no kubelet on the PATH") {
		t.Fatalf("want FileExisting-kubelet to fail, got %v", failed)
	}
}

// TestClusterNeeds: the families come from the cluster's ranges, the
// kubelet's settings from extraConfig over its defaults, and the proxy
// mode from the addon, none when it is disabled.
func TestClusterNeeds(t *testing.T) {
	c := config.New()
	config.SetDefaults(c, config.Host{Name: "n", Address: "10.0.0.1"})
	c.Networking.ServiceSubnet, c.Networking.PodSubnet = "10.96.0.0/12,fd00:10:96::/112", "10.244.0.0/16,fd00:10:244::/56"
	c.Kubelet.ExtraConfig = map[string]any{"failSwapOn": false}
	n := phases.ClusterNeeds(c)
	if !n.IPv4 || !n.IPv6 || n.FailSwapOn || !n.FailCgroupV1 || n.ProxyMode != config.ProxyModeNftables {
		t.Errorf("dual-stack cluster with failSwapOn false: %+v", n)
	}
	c.Networking.ServiceSubnet, c.Networking.PodSubnet = "fd00:10:96::/112", ""
	c.Addons.KubeProxy.Disabled = true
	if n := phases.ClusterNeeds(c); n.IPv4 || !n.IPv6 || n.ProxyMode != "" {
		t.Errorf("IPv6 cluster without kube-proxy: %+v", n)
	}
}

// TestDryRunHostChecksWarn: a dry run reports the host checks that fail
// as warnings and goes on; a real run fails on them. No kubelet on the
// PATH and no runtime fail on any machine.
func TestDryRunHostChecksWarn(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for _, dryRun := range []bool{true, false} {
		s, out := preflightOn(t)
		s.Config.Kubelet.ContainerRuntimeEndpoint = "unix:///run/kb-none.sock"
		s.Options.IgnorePreflightErrors = []string{"port-2379", "port-2380", "port-2381", "port-10257", "port-10259", "port-10270", "isprivilegeduser", "imagepull"}
		s.Options.DryRun = dryRun
		err := phases.Preflight.Run(context.Background(), s)
		if dryRun {
			if err != nil || !strings.Contains(out.String(), "WARNING: FileExisting-kubelet") || !strings.Contains(out.String(), "WARNING: CRI") {
				t.Errorf("dry run: %v, want warnings of FileExisting-kubelet and CRI:\n%s", err, out)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "FileExisting-kubelet") || !strings.Contains(err.Error(), "CRI") {
			t.Errorf("real run: %v, want FileExisting-kubelet and CRI to fail", err)
		}
	}
}
