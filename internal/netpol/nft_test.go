package netpol

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// testNet is network namespaces of a test's own: pods a and b on two
// subnets, the node n routing between them, where the table goes, and
// pods c and d on one bridge of n, as a node's pods are on its CNI bridge.
type testNet struct{ prefix string }

func (n testNet) ns(name string) string { return n.prefix + name }

// newTestNet makes a (10.99.1.2), b (10.99.2.2), c (10.99.3.2) and d
// (10.99.3.3) around n, and removes them when the test ends.
func newTestNet(t *testing.T) testNet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the enforcer's test makes network namespaces: run it as root, as make test does")
	}
	n := testNet{prefix: fmt.Sprintf("kbnp%d-", os.Getpid())}
	// `ip netns add` makes /run/netns, a mount point of its own, where a
	// fresh host has none: the test removes it again once it is empty, so
	// the host is as it was (cleanups run last-registered first, after the
	// namespaces' deletion).
	if _, err := os.Stat(netnsDir); os.IsNotExist(err) {
		t.Cleanup(func() {
			if entries, err := os.ReadDir(netnsDir); err == nil && len(entries) == 0 {
				_ = unix.Unmount(netnsDir, unix.MNT_DETACH)
				_ = os.Remove(netnsDir)
			}
		})
	}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	for _, name := range []string{"n", "a", "b", "c", "d"} {
		run("netns", "add", n.ns(name))
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", n.ns(name)).Run() })
		run("-n", n.ns(name), "link", "set", "lo", "up")
	}
	for i, pod := range []string{"a", "b"} {
		subnet := fmt.Sprintf("10.99.%d", i+1)
		run("-n", n.ns("n"), "link", "add", "to-"+pod, "type", "veth", "peer", "name", "eth0", "netns", n.ns(pod))
		run("-n", n.ns("n"), "addr", "add", subnet+".1/24", "dev", "to-"+pod)
		run("-n", n.ns("n"), "link", "set", "to-"+pod, "up")
		run("-n", n.ns(pod), "addr", "add", subnet+".2/24", "dev", "eth0")
		run("-n", n.ns(pod), "link", "set", "eth0", "up")
		run("-n", n.ns(pod), "route", "add", "default", "via", subnet+".1")
	}
	run("-n", n.ns("n"), "link", "add", "br0", "type", "bridge")
	run("-n", n.ns("n"), "addr", "add", "10.99.3.1/24", "dev", "br0")
	run("-n", n.ns("n"), "link", "set", "br0", "up")
	for i, pod := range []string{"c", "d"} {
		run("-n", n.ns("n"), "link", "add", "to-"+pod, "type", "veth", "peer", "name", "eth0", "netns", n.ns(pod))
		run("-n", n.ns("n"), "link", "set", "to-"+pod, "master", "br0", "up")
		run("-n", n.ns(pod), "addr", "add", fmt.Sprintf("10.99.3.%d/24", i+2), "dev", "eth0")
		run("-n", n.ns(pod), "link", "set", "eth0", "up")
		run("-n", n.ns(pod), "route", "add", "default", "via", "10.99.3.1")
	}
	// Forwarding inside n's namespace only: /proc/sys/net is the writer's.
	if out, err := exec.Command("ip", "netns", "exec", n.ns("n"), "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward").CombinedOutput(); err != nil {
		t.Fatalf("forwarding in %s: %v: %s", n.ns("n"), err, out)
	}
	return n
}

// netnsDir is where `ip netns` keeps the namespaces it names.
const netnsDir = "/run/netns"

// in runs f on a thread of its own in namespace name; the thread ends
// with f, so no other code runs in that namespace.
func (n testNet) in(t *testing.T, name string, f func()) {
	t.Helper()
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		fd, err := unix.Open(filepath.Join(netnsDir, n.ns(name)), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			_ = unix.Close(fd)
		}
		if err == nil {
			f()
		}
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatalf("enter %s: %v", n.ns(name), err)
	}
}

// apply replaces the table in n with the verdicts.
func (n testNet) apply(t *testing.T, verdicts []Verdicts) {
	t.Helper()
	fd, err := unix.Open(filepath.Join(netnsDir, n.ns("n")), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Close(fd) }()
	conn, err := nftables.New(nftables.WithNetNSFd(fd))
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(conn, verdicts); err != nil {
		t.Fatal(err)
	}
}

// listen serves TCP on each port in pod, answering every connection with
// the port, until the test ends.
func (n testNet) listen(t *testing.T, pod string, ports ...int) {
	t.Helper()
	for _, port := range ports {
		var l net.Listener
		var err error
		n.in(t, pod, func() { l, err = net.Listen("tcp4", fmt.Sprintf(":%d", port)) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_, _ = fmt.Fprintf(c, "%d\n", port)
				_ = c.Close()
			}
		}()
	}
}

// connects says whether a connection from pod to addr is answered.
func (n testNet) connects(t *testing.T, pod, addr string) bool {
	t.Helper()
	var err error
	n.in(t, pod, func() {
		var c net.Conn
		if c, err = net.DialTimeout("tcp4", addr, 400*time.Millisecond); err == nil {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			_, err = c.Read(make([]byte, 8))
			_ = c.Close()
		}
	})
	return err == nil
}

// TestApplyEnforces: the table replaced in the node's namespace decides,
// packet by packet, what reaches an isolated pod and what an isolated pod
// may reach: ports, peers, an ipBlock's exceptions, deny-all; replacing
// it again takes the old rules away at once.
func TestApplyEnforces(t *testing.T) {
	n := newTestNet(t)
	n.listen(t, "b", 8080, 8081)
	n.listen(t, "a", 9090)
	n.listen(t, "d", 8080)
	a := Pod{Namespace: "x", Name: "a", IPs: []netip.Addr{netip.MustParseAddr("10.99.1.2")}}
	b := Pod{Namespace: "x", Name: "b", IPs: []netip.Addr{netip.MustParseAddr("10.99.2.2")}}
	d := Pod{Namespace: "x", Name: "d", IPs: []netip.Addr{netip.MustParseAddr("10.99.3.3")}}
	rules := func(r ...Rule) *[]Rule { return &r }
	tcp := func(from, to uint16) PortRange { return PortRange{Protocol: corev1.ProtocolTCP, From: from, To: to} }
	fromA := []netip.Prefix{netip.MustParsePrefix("10.99.1.2/32")}

	for _, tt := range []struct {
		name     string
		verdicts []Verdicts
		want     map[string]bool // "pod->addr": connects
	}{
		{"no policy", nil, map[string]bool{"a->10.99.2.2:8080": true, "a->10.99.2.2:8081": true, "b->10.99.1.2:9090": true, "c->10.99.3.3:8080": true}},
		// Pods on one bridge: the bridge passes their packets through the
		// forward hook (bridge-nf-call-iptables, a new namespace's default).
		{"d admits nothing, on c's bridge too", []Verdicts{{Pod: d, Ingress: rules()}},
			map[string]bool{"c->10.99.3.3:8080": false, "a->10.99.3.3:8080": false}},
		{"d admits c", []Verdicts{{Pod: d, Ingress: rules(Rule{Peers: []netip.Prefix{netip.MustParsePrefix("10.99.3.2/32")}})}},
			map[string]bool{"c->10.99.3.3:8080": true, "a->10.99.3.3:8080": false}},
		{"b admits a on 8080", []Verdicts{{Pod: b, Ingress: rules(Rule{Peers: fromA, Ports: []PortRange{tcp(8080, 8080)}})}},
			map[string]bool{"a->10.99.2.2:8080": true, "a->10.99.2.2:8081": false, "b->10.99.1.2:9090": true}},
		{"b admits a port range", []Verdicts{{Pod: b, Ingress: rules(Rule{Peers: fromA, Ports: []PortRange{tcp(8081, 8090)}})}},
			map[string]bool{"a->10.99.2.2:8080": false, "a->10.99.2.2:8081": true}},
		{"b admits a's subnet but a", []Verdicts{{Pod: b, Ingress: rules(Rule{Peers: []netip.Prefix{netip.MustParsePrefix("10.99.1.0/24")}, Except: fromA})}},
			map[string]bool{"a->10.99.2.2:8080": false}},
		{"b admits a's subnet", []Verdicts{{Pod: b, Ingress: rules(Rule{Peers: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/16")}})}},
			map[string]bool{"a->10.99.2.2:8080": true, "a->10.99.2.2:8081": true}},
		{"b admits nothing", []Verdicts{{Pod: b, Ingress: rules()}},
			map[string]bool{"a->10.99.2.2:8080": false, "b->10.99.1.2:9090": true}},
		{"a may reach nothing: b's replies still pass", []Verdicts{{Pod: a, Egress: rules()}},
			map[string]bool{"a->10.99.2.2:8080": false, "b->10.99.1.2:9090": true}},
		{"a may reach b on UDP only", []Verdicts{{Pod: a, Egress: rules(Rule{Ports: []PortRange{{Protocol: corev1.ProtocolUDP}}})}},
			map[string]bool{"a->10.99.2.2:8080": false}},
		{"a may reach b on 8081", []Verdicts{{Pod: a, Egress: rules(Rule{Peers: []netip.Prefix{netip.MustParsePrefix("10.99.2.2/32")}, Ports: []PortRange{tcp(8081, 8081)}})}},
			map[string]bool{"a->10.99.2.2:8080": false, "a->10.99.2.2:8081": true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n.apply(t, tt.verdicts)
			for path, want := range tt.want {
				from, to, _ := strings.Cut(path, "->")
				if got := n.connects(t, from, to); got != want {
					t.Errorf("%s connects: %v, want %v", path, got, want)
				}
			}
		})
	}
}

// TestChainName: a pod's chain is named after it, or after a hash of it
// when namespace and name together are longer than a chain's name may be.
func TestChainName(t *testing.T) {
	if got := chainName("ingress", Pod{Namespace: "x", Name: "web"}); got != "ingress x/web" {
		t.Errorf("chainName = %q", got)
	}
	long := Pod{Namespace: strings.Repeat("n", 63), Name: strings.Repeat("p", 253)}
	other := Pod{Namespace: long.Namespace, Name: strings.Repeat("p", 252) + "q"}
	if got := chainName("egress", long); len(got) > maxChainName || got == chainName("egress", other) || !strings.HasPrefix(got, "egress ") {
		t.Errorf("long names: %q and %q", got, chainName("egress", other))
	}
}
