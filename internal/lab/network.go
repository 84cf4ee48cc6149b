package lab

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// ip runs iproute2's ip with args.
func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// vethName is the hub's end of a node's link to the bridge when "v-<node>"
// is too long for a link name: "kbv-" and a hash of the node's namespace.
func vethName(netns string) string {
	sum := sha256.Sum256([]byte(netns))
	return "kbv-" + hex.EncodeToString(sum[:])[:11]
}

// checkHub refuses a lab whose hub namespace exists: a lab of its name is
// up, over which nothing is set up.
func (c *Cluster) checkHub() error {
	if _, err := os.Stat(filepath.Join("/run/netns", c.Hub())); err == nil {
		return fmt.Errorf("the lab's network namespace %s exists: a lab named %q is up; run `kubeboot lab down --cluster %s` first", c.Hub(), c.Name, c.source)
	}
	return nil
}

// SetUpNetwork creates the lab's network, all of it inside namespaces the
// lab creates, so nothing is addressed in the host's: the hub namespace
// (kb-<name>) holds a bridge per network of nodes (br0 for the subnet,
// br1... for the routed subnets), each with its network's first address
// as its nodes' gateway (br0's is also the load balancer's), and routes
// between them, forwarding inside its own namespace; each node's
// namespace is set up by SetUpNode. It refuses a hub that exists: that
// lab is still up.
func (c *Cluster) SetUpNetwork(ctx context.Context) error {
	hub := c.Hub()
	if err := c.checkHub(); err != nil {
		return err
	}
	// Whether the lab makes /run/netns, which its teardown then removes
	// once empty: one that was there before is the host's.
	if _, err := os.Stat(netnsDir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(c.Dir, 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(c.netnsDirMarker(), nil, 0o600); err != nil {
			return err
		}
	}
	steps := [][]string{
		{"netns", "add", hub},
		{"-n", hub, "link", "set", "lo", "up"},
	}
	for i, subnet := range c.subnets() {
		br := fmt.Sprintf("br%d", i)
		steps = append(steps,
			[]string{"-n", hub, "link", "add", br, "type", "bridge"},
			[]string{"-n", hub, "addr", "add", netip.PrefixFrom(subnet.Addr().Next(), subnet.Bits()).String(), "dev", br},
			[]string{"-n", hub, "link", "set", br, "up"})
	}
	if p, ok := c.subnet6(); ok {
		// Without duplicate address detection, the address serves at once.
		steps = append(steps, []string{"-n", hub, "addr", "add", netip.PrefixFrom(p.Addr().Next(), p.Bits()).String(), "dev", "br0", "nodad"})
	}
	for _, step := range steps {
		if err := ip(ctx, step...); err != nil {
			return err
		}
	}
	if len(c.RoutedSubnets) > 0 {
		if err := enableForwarding(ctx, hub); err != nil {
			return err
		}
	}
	for i := range c.Nodes {
		if err := c.SetUpNode(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// SetUpNode creates the network namespace of the cluster's i-th node on
// the hub's bridge of its network: linked by a veth pair, with the node's
// address on eth0 (in a dual-stack lab, one of each family), loopback up,
// a default route through the hub (one per family), and forwarding on, as
// a node's installation sets it.
func (c *Cluster) SetUpNode(ctx context.Context, i int) error {
	n, hub := c.Nodes[i], c.Hub()
	ns := c.Netns(n.Name)
	veth := "v-" + n.Name
	if len(veth) > 15 {
		veth = vethName(ns)
	}
	steps := [][]string{
		{"netns", "add", ns},
		{"-n", hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"-n", hub, "link", "set", veth, "master", fmt.Sprintf("br%d", c.subnetIndex(i)), "up"},
		{"-n", ns, "addr", "add", c.Address(i).String() + "/24", "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "route", "add", "default", "via", c.Gateway(i).String()},
	}
	if a, ok := c.Address6(i); ok {
		// flanneld takes the IPv6 address of the default route's link.
		p, _ := c.subnet6()
		steps = append(steps,
			[]string{"-n", ns, "addr", "add", netip.PrefixFrom(a, p.Bits()).String(), "dev", "eth0", "nodad"},
			[]string{"-n", ns, "-6", "route", "add", "default", "via", p.Addr().Next().String()})
	}
	for _, step := range steps {
		if err := ip(ctx, step...); err != nil {
			return err
		}
	}
	return enableForwarding(ctx, ns)
}

// forwardingScript turns forwarding on, as a node's installation does and
// kubeadm's preflight checks, in both families (IPv6 where the kernel has
// it). A new network namespace inherits the host's values, which a fresh
// machine has at 0; each node sets its own, and the host's stay.
const forwardingScript = `for f in /proc/sys/net/ipv4/ip_forward /proc/sys/net/ipv6/conf/all/forwarding /proc/sys/net/ipv6/conf/default/forwarding; do
  [ ! -e "$f" ] || echo 1 > "$f" || exit 1
done`

// enableForwarding turns forwarding on in the node's network namespace:
// /proc/sys/net is the namespace of the process that writes it.
func enableForwarding(ctx context.Context, netns string) error {
	if out, err := InNamespace(ctx, netns, "sh", "-c", forwardingScript).CombinedOutput(); err != nil {
		return fmt.Errorf("turn forwarding on in %s: %w: %s", netns, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// TearDownNetwork deletes the nodes' namespaces, which takes their links,
// routes, pod bridges and iptables rules with them, then the hub's, which
// takes the bridge. Whatever is already gone is skipped.
func (c *Cluster) TearDownNetwork(ctx context.Context) error {
	var errs []error
	for _, ns := range append(c.nodeNamespaces(), c.Hub()) {
		if _, err := os.Stat(filepath.Join("/run/netns", ns)); err == nil {
			if err := ip(ctx, "netns", "delete", ns); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if _, err := os.Stat(c.netnsDirMarker()); err == nil {
		removeNetnsDir()
		if err := os.Remove(c.netnsDirMarker()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// netnsDir is where `ip netns` keeps the namespaces it names.
const netnsDir = "/run/netns"

// netnsDirMarkerName is the file in the lab's dir that exists while the
// lab's network is up if the lab made netnsDir.
const netnsDirMarkerName = "made-run-netns"

func (c *Cluster) netnsDirMarker() string { return filepath.Join(c.Dir, netnsDirMarkerName) }

func (c *Cluster) nodeNamespaces() []string {
	var names []string
	for _, n := range c.Nodes {
		names = append(names, c.Netns(n.Name))
	}
	return names
}

// InNamespace wraps a command to run in one of the lab's network
// namespaces (a node's, or the hub), with the host's mount namespace: a
// node's containerd and kubelet must see each other's mounts.
func InNamespace(ctx context.Context, netns, binary string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + filepath.Join("/run/netns", netns), "--", binary}, args...)...)
}

// removeNetnsDir removes netnsDir, which the lab made, once the lab's
// namespaces were the last in it: `ip netns add` makes it a mount point
// of its own, so it is unmounted first.
func removeNetnsDir() {
	if entries, err := os.ReadDir(netnsDir); err != nil || len(entries) > 0 {
		return
	}
	_ = syscall.Unmount(netnsDir, syscall.MNT_DETACH)
	_ = os.Remove(netnsDir)
}
