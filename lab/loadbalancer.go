package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// apiServerPort is the port of every API server of a lab cluster, and of
// its load balancer.
const apiServerPort = 6443

// Endpoint is the cluster's API endpoint for its nodes: the load balancer
// in the hub in front of several control-plane nodes, else the only one's
// API server.
func (c *Cluster) Endpoint() netip.AddrPort {
	if cps := c.ControlPlanes(); len(cps) == 1 {
		return netip.AddrPortFrom(c.Address(cps[0]), apiServerPort)
	}
	return netip.AddrPortFrom(c.HubAddress(), apiServerPort)
}

// labKubeProxy is what every lab cluster's kube-proxy is told on top of
// kubeboot's defaults. A lab node is a network namespace on the shared
// host, and the conntrack table's size (nf_conntrack_max and the
// nf_conntrack module's hashsize) is the host's, not the namespace's: with
// maxPerCore 0, kube-proxy leaves it as it is, as kind's nodes do, rather
// than raising it for the whole machine (or failing where it may not).
var labKubeProxy = map[string]any{"conntrack": map[string]any{"maxPerCore": 0}}

// hasWorkers says whether the cluster lists workers; without them the
// control-plane nodes stay untainted, so that pods can run on them.
func (c *Cluster) hasWorkers() bool {
	for _, n := range c.Nodes {
		if n.Role == RoleWorker {
			return true
		}
	}
	return false
}

// LoadBalancer is the haproxy daemon in the hub: the control-plane nodes'
// load balancer, and the host's way in.
func (c *Cluster) LoadBalancer() Daemon { return Daemon{Name: "haproxy", Dir: c.Dir} }

// StartLoadBalancer runs haproxy in the hub, in TCP mode, round-robin over
// the control-plane nodes' API servers, each checked on /readyz as a real
// load balancer checks it. It serves the nodes on the hub's address (the
// controlPlaneEndpoint of several control-plane nodes) and the host on
// hostListener, a socket on the host's loopback that haproxy inherits.
func (c *Cluster) StartLoadBalancer(ctx context.Context, hostListener *os.File) error {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/haproxy"); err != nil {
			return fmt.Errorf("find haproxy: %w (the lab's load balancer: apt-get install haproxy)", err)
		}
	}
	var b strings.Builder
	b.WriteString("defaults\n  mode tcp\n  timeout connect 2s\n  timeout client 5m\n  timeout server 5m\n")
	// fd@3 is hostListener: the first of the daemon's extra files.
	fmt.Fprintf(&b, "frontend api\n  bind %s\n  bind fd@3\n  default_backend nodes\n", netip.AddrPortFrom(c.HubAddress(), apiServerPort))
	b.WriteString("backend nodes\n  balance roundrobin\n  option redispatch\n  retries 3\n  option httpchk GET /readyz\n  http-check expect status 200\n")
	for _, i := range c.ControlPlanes() {
		// The check only reads the status code, so it skips verification.
		fmt.Fprintf(&b, "  server %s %s check check-ssl verify none inter 1s fall 2 rise 1\n", c.Nodes[i].Name, netip.AddrPortFrom(c.Address(i), apiServerPort))
	}
	path := filepath.Join(c.Dir, "haproxy.cfg")
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return err
	}
	if err := writeAtomic(path, []byte(b.String())); err != nil {
		return err
	}
	d := c.LoadBalancer()
	d.ExtraFiles = []*os.File{hostListener}
	cmd := InNamespace(ctx, c.Hub(), bin, "-db", "-f", path)
	return d.Start(cmd.Path, cmd.Args[1:]...)
}
