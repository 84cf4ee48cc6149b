package lab

import (
	"context"
	"fmt"
	"net"
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

// listeners are the sockets on this host's loopback that the load
// balancer inherits: the API's, on a free port, then one per port mapping.
type listeners struct {
	// api is the API's address, host:port.
	api string
	// files are the sockets, the API's first, then the port mappings' in
	// their order.
	files []*os.File
}

// listen opens the lab's sockets on this host's loopback. A mapping's
// port that is taken is refused, naming it.
func (c *Cluster) listen() (listeners, error) {
	var ls listeners
	open := func(addr string) (string, error) {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return "", err
		}
		defer func() { _ = l.Close() }()
		f, err := l.(*net.TCPListener).File()
		if err != nil {
			return "", err
		}
		ls.files = append(ls.files, f)
		return l.Addr().String(), nil
	}
	var err error
	if ls.api, err = open("127.0.0.1:0"); err != nil {
		return ls, fmt.Errorf("listen on the host's loopback for the lab: %w", err)
	}
	for i, p := range c.PortMappings {
		if _, err := open(fmt.Sprintf("127.0.0.1:%d", p.HostPort)); err != nil {
			ls.close()
			return ls, &InputError{Err: fmt.Errorf("%s: portMappings[%d].hostPort: %w: choose a free port", c.source, i, err)}
		}
	}
	return ls, nil
}

// close closes the lab's copies of the sockets; the load balancer keeps
// its own.
func (ls listeners) close() {
	for _, f := range ls.files {
		_ = f.Close()
	}
}

// StartLoadBalancer runs haproxy in the hub, in TCP mode. Its API frontend
// round-robins over the control-plane nodes' API servers, each checked on
// /readyz as a real load balancer checks it, and serves the nodes on the
// hub's address (the controlPlaneEndpoint of several control-plane nodes)
// and the host on files[0], a socket of the host's loopback that haproxy
// inherits. Each port mapping's frontend serves files[1+i], round-robin
// over every node's NodePort.
func (c *Cluster) StartLoadBalancer(ctx context.Context, files []*os.File) error {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/haproxy"); err != nil {
			return fmt.Errorf("find haproxy: %w (the lab's load balancer: apt-get install haproxy)", err)
		}
	}
	var b strings.Builder
	b.WriteString("defaults\n  mode tcp\n  timeout connect 2s\n  timeout client 5m\n  timeout server 5m\n")
	// fd@3 is files[0]: the first of the daemon's extra files.
	fmt.Fprintf(&b, "frontend api\n  bind %s\n  bind fd@3\n  default_backend nodes\n", netip.AddrPortFrom(c.HubAddress(), apiServerPort))
	b.WriteString("backend nodes\n  balance roundrobin\n  option redispatch\n  retries 3\n  option httpchk GET /readyz\n  http-check expect status 200\n")
	for _, i := range c.ControlPlanes() {
		// The check only reads the status code, so it skips verification.
		fmt.Fprintf(&b, "  server %s %s check check-ssl verify none inter 1s fall 2 rise 1\n", c.Nodes[i].Name, netip.AddrPortFrom(c.Address(i), apiServerPort))
	}
	for i, p := range c.PortMappings {
		// A node whose NodePort does not answer yet is retried on another.
		fmt.Fprintf(&b, "frontend port-%d\n  bind fd@%d\n  default_backend nodeport-%d\n", p.HostPort, 4+i, p.HostPort)
		fmt.Fprintf(&b, "backend nodeport-%d\n  balance roundrobin\n  option redispatch\n  retries 3\n", p.HostPort)
		for j, n := range c.Nodes {
			fmt.Fprintf(&b, "  server %s %s\n", n.Name, netip.AddrPortFrom(c.Address(j), uint16(p.NodePort)))
		}
	}
	path := filepath.Join(c.Dir, "haproxy.cfg")
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return err
	}
	if err := writeAtomic(path, []byte(b.String())); err != nil {
		return err
	}
	d := c.LoadBalancer()
	d.ExtraFiles = files
	cmd := InNamespace(ctx, c.Hub(), bin, "-db", "-f", path)
	return d.Start(cmd.Path, cmd.Args[1:]...)
}
