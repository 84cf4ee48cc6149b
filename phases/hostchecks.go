package phases

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/cri"
	"github.com/kubeboot/kubeboot/internal/workflow"
)

// Host is the machine the host checks look at, through its /proc and /sys
// under Root: "/" on a node, a tree of a test's own in tests.
type Host struct {
	// Root is the directory that holds the machine's proc and sys.
	Root string
}

// ThisHost is the machine kubeboot runs on.
func ThisHost() Host { return Host{Root: "/"} }

// path is a path of the host's, under its Root.
func (h Host) path(p string) string { return filepath.Join(h.Root, p) }

// NodeNeeds is what a node's settings ask of its host: the IP families its
// pods and Services use, what its kubelet refuses, the kube-proxy mode
// ("" without kube-proxy) and its container runtime.
type NodeNeeds struct {
	// IPv4 and IPv6 are the families of the cluster's address ranges.
	IPv4, IPv6 bool
	// FailSwapOn and FailCgroupV1 are the kubelet's settings of those names.
	FailSwapOn, FailCgroupV1 bool
	// ProxyMode is kube-proxy's mode, or "" when the node runs none.
	ProxyMode string
	// RuntimeEndpoint is the CRI socket the kubelet uses.
	RuntimeEndpoint string
}

// ClusterNeeds is what a control-plane node of c needs of its host.
func ClusterNeeds(c *config.ClusterConfiguration) NodeNeeds {
	n := KubeletNeeds(c.Kubelet.ExtraConfig, c.Kubelet.ContainerRuntimeEndpoint)
	n.IPv4 = false
	for _, cidr := range strings.Split(c.Networking.ServiceSubnet+","+c.Networking.PodSubnet, ",") {
		if ip, _, err := net.ParseCIDR(strings.TrimSpace(cidr)); err == nil {
			n.IPv4 = n.IPv4 || ip.To4() != nil
			n.IPv6 = n.IPv6 || ip.To4() == nil
		}
	}
	if !c.Addons.KubeProxy.Disabled {
		n.ProxyMode = c.Addons.KubeProxy.Mode
	}
	return n
}

// KubeletNeeds is what a node's kubelet needs of its host, from its
// KubeletConfiguration fields (extra) and its runtime's endpoint, for a
// node whose cluster's address ranges it does not know: IPv4, as kubeadm's
// join assumes, and the kernel Kubernetes supports.
func KubeletNeeds(extra map[string]any, endpoint string) NodeNeeds {
	return NodeNeeds{
		IPv4:            true,
		FailSwapOn:      boolSetting(extra, "failSwapOn", true),
		FailCgroupV1:    boolSetting(extra, "failCgroupV1", true),
		RuntimeEndpoint: endpoint,
	}
}

// boolSetting is a boolean KubeletConfiguration field from extraConfig, or
// the kubelet's default.
func boolSetting(extra map[string]any, name string, fallback bool) bool {
	if v, ok := extra[name].(bool); ok {
		return v
	}
	return fallback
}

// The kernels kubeboot's nodes need, as major*1000 + minor.
const (
	// kernelFloor is the oldest kernel Kubernetes supports, 4.19.
	kernelFloor = 4_019
	// kernelNftables is the oldest kernel kube-proxy's nftables mode runs on, 5.13.
	kernelNftables = 5_013
)

// runtimeCheckTimeout bounds the runtime's answer to the CRI check.
const runtimeCheckTimeout = 10 * time.Second

// HostChecks are the checks of the machine itself that a node needs, each
// named as kubeadm's where kubeadm has it, so that --ignore-preflight-errors
// takes the same names: IP forwarding for each family, swap, the cgroup
// version, the kernel version, the kubelet binary (which r's System finds)
// and the container runtime answering on its socket (under r's root).
func HostChecks(r *workflow.Run, h Host, n NodeNeeds) []Check {
	var checks []Check
	if n.IPv4 {
		checks = append(checks, forwardingCheck(h, "/proc/sys/net/ipv4/ip_forward", "net.ipv4.ip_forward"))
	}
	if n.IPv6 {
		checks = append(checks, forwardingCheck(h, "/proc/sys/net/ipv6/conf/default/forwarding", "net.ipv6.conf.default.forwarding"))
	}
	return append(checks,
		Check{Name: "Swap", Run: func(context.Context) error { return checkSwap(h, n.FailSwapOn) }},
		Check{Name: "CgroupV1", Run: func(context.Context) error { return checkCgroupV1(h, n.FailCgroupV1) }},
		Check{Name: "KernelVersion", Run: func(context.Context) error { return checkKernel(h, n.ProxyMode) }},
		Check{Name: "FileExisting-kubelet", Run: func(context.Context) error { return checkKubeletBinary(r.System) }},
		Check{Name: "CRI", Run: func(ctx context.Context) error { return checkRuntime(ctx, r, n.RuntimeEndpoint) }},
	)
}

// forwardingCheck fails unless the sysctl file holds 1: a node forwards
// its pods' packets and those of Services.
func forwardingCheck(h Host, file, sysctl string) Check {
	name := "FileContent-" + strings.ReplaceAll(file, "/", "-")
	return Check{Name: name, Run: func(context.Context) error {
		data, err := os.ReadFile(h.path(file))
		if err != nil {
			return fmt.Errorf("read %s: %w", file, err)
		}
		if v := strings.TrimSpace(string(data)); v != "1" {
			return fmt.Errorf("%s is %s, not 1: a node forwards its pods' and Services' packets: set %s = 1 (`sysctl -w %s=1`, and in /etc/sysctl.d/ to keep it)",
				file, v, sysctl, sysctl)
		}
		return nil
	}}
}

// checkSwap fails when swap is on and the kubelet refuses it.
func checkSwap(h Host, failSwapOn bool) error {
	data, err := os.ReadFile(h.path("/proc/swaps"))
	if err != nil {
		return fmt.Errorf("read /proc/swaps: %w", err)
	}
	// The first line is the table's header.
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) < 2 || !failSwapOn {
		return nil
	}
	return fmt.Errorf("swap is on (%s) and the kubelet refuses to start with it: turn it off (`swapoff -a`, and remove it from /etc/fstab), or set kubelet.extraConfig.failSwapOn: false",
		strings.Fields(lines[1])[0])
}

// checkCgroupV1 fails on a cgroup v1 host when the kubelet refuses one. A
// host of cgroup v2 mounts the unified hierarchy at /sys/fs/cgroup, which
// then lists its controllers.
func checkCgroupV1(h Host, failCgroupV1 bool) error {
	_, err := os.Stat(h.path("/sys/fs/cgroup/cgroup.controllers"))
	if err == nil || !failCgroupV1 {
		return nil
	}
	return errors.New("this host uses cgroup v1 (/sys/fs/cgroup is not the unified hierarchy) and the kubelet refuses it: boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1), or set kubelet.extraConfig.failCgroupV1: false")
}

// checkKernel fails on a kernel older than Kubernetes supports, or than
// kube-proxy's mode needs.
func checkKernel(h Host, proxyMode string) error {
	data, err := os.ReadFile(h.path("/proc/sys/kernel/osrelease"))
	if err != nil {
		return fmt.Errorf("read /proc/sys/kernel/osrelease: %w", err)
	}
	release := strings.TrimSpace(string(data))
	have, err := kernelVersion(release)
	if err != nil {
		return err
	}
	want, why := kernelFloor, "Kubernetes supports"
	fix := "upgrade the kernel"
	if proxyMode == config.ProxyModeNftables {
		want, why = kernelNftables, "kube-proxy's nftables mode needs"
		fix = "upgrade the kernel, or set addons.kubeProxy.mode: iptables"
	}
	if have < want {
		return fmt.Errorf("the kernel is %s, older than the %d.%d that %s: %s", release, want/1000, want%1000, why, fix)
	}
	return nil
}

// kernelVersion reads the major and minor version of a kernel release such
// as 6.1.0-18-amd64, as major*1000 + minor.
func kernelVersion(release string) (int, error) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, fmt.Errorf("kernel release %q is not major.minor", release)
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil || minor >= 1000 {
		return 0, fmt.Errorf("kernel release %q is not major.minor", release)
	}
	return major*1000 + minor, nil
}

// checkKubeletBinary fails when no kubelet is on the PATH, where systemd's
// kubelet.service and the start kubeboot prints look for it.
func checkKubeletBinary(sys workflow.System) error {
	if _, err := sys.LookPath("kubelet"); err != nil {
		return errors.New("no kubelet on the PATH: install the kubelet of the cluster's release (in /usr/bin, where kubelet.service runs it)")
	}
	return nil
}

// checkRuntime fails unless the container runtime answers on its socket:
// the kubelet runs nothing without it.
func checkRuntime(ctx context.Context, s *workflow.Run, endpoint string) error {
	runtime, err := cri.Dial(endpoint, s.Files.HostPath)
	if err != nil {
		return fmt.Errorf("%w: start the container runtime (`systemctl start containerd`), or fix kubelet.containerRuntimeEndpoint", err)
	}
	defer func() { _ = runtime.Close() }()
	ctx, cancel := context.WithTimeout(ctx, runtimeCheckTimeout)
	defer cancel()
	if _, err := runtime.Version(ctx); err != nil {
		return fmt.Errorf("%w: the runtime does not serve the CRI there: check that it runs, with its CRI plugin enabled", err)
	}
	return nil
}
