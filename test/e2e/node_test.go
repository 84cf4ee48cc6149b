//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/lab"
	"github.com/kubeboot/kubeboot/internal/machine"
)

// nodeTemplate is the config of a test's control-plane node: every path
// of kubeboot's under DIR, the node's directory, so that the test reads
// them on the host; the kubelet's and containerd's own state stays on the
// machine's disk, as on any node. The pod network is kubeboot's flannel
// (PODSUBNET), which makes the nodes Ready; CoreDNS and kube-proxy are
// left out: these tests are about the control plane (TestAddons and
// TestClusterLife run them).
const nodeTemplate = `apiVersion: kubeboot.io/v1alpha1
kind: ClusterConfiguration
clusterName: e2e
node:
  name: NAME
  advertiseAddress: ADDRESS
networking:
  podSubnet: PODSUBNET
etcd:
  local:
    dataDir: DIR/etcd
    snapshotsDir: DIR/etcd-snapshots
certificates:
  dir: DIR/pki
paths:
  manifestsDir: DIR/manifests
  kubeconfigDir: DIR
kubelet:
  configFile: DIR/kubelet/config.yaml
  extraConfig:` + kubeletSettings + `
timeouts:
  controlPlane: 3m
security:
  audit:
    logDir: DIR/audit
addons:
  coreDNS:
    disabled: true
  kubeProxy:
    disabled: true
`

// commandTimeout bounds every command, so a hang fails the test.
const commandTimeout = 5 * time.Minute

// node is one control-plane node of a test: a machine of a lab of
// machines (systemd as PID 1, containerd and the kubelet as its
// services), on the lab's network at addr, into which the test's root is
// shared at the same path. The test runs kubeboot in the machine as an
// operator would, and reads what it wrote from the host.
type node struct {
	// t is the test that owns the node: its cleanup reports there.
	t *testing.T
	// root holds the config files, patches and dir, shared with the
	// machine at the same path.
	root string
	// dir is the node's directory: pki, manifests, kubeconfigs, etcd.
	dir  string
	addr string
	name string
	// config is the node's main config file.
	config string
	// m is the node's machine, and lab the lab of machines it is in.
	m   machine.Machine
	lab *lab.Cluster
	// netns is the node's network namespace, which the host's kubectl
	// and the test's own connections enter to reach it.
	netns string
}

// result is what a command did.
type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// newNode makes a lab of one node, e2e-<label>, on subnet (a /24 of the
// test's own), booted and ready for kubeboot init.
func newNode(t *testing.T, label, subnet string) *node {
	t.Helper()
	return newNodes(t, label, subnet, nil, label)[0]
}

// newNodes makes a lab of machines named name on subnet, one node
// e2e-<label> per label, each with its config written, the images of
// those configs (and of versions too, the other releases the test moves
// to) in their containerd, booted and ready for kubeboot init. The
// cleanups bring the lab down, check that nothing of it is left, and
// remove each node's root unless the test failed.
func newNodes(t *testing.T, name, subnet string, versions []string, labels ...string) []*node {
	t.Helper()
	var nodes []*node
	var list strings.Builder
	for i, label := range labels {
		// A short root keeps socket paths under the 108-byte limit.
		root, err := os.MkdirTemp("", "kb-e2e-")
		if err != nil {
			t.Fatal(err)
		}
		n := &node{t: t, root: root, dir: filepath.Join(root, "n"), name: "e2e-" + label}
		// Registered before the lab's: it runs once the machines are gone.
		t.Cleanup(n.cleanup)
		nodes = append(nodes, n)
		// A description lists at most three control-plane nodes; only it
		// (and its load balancer) reads the role: the test decides what
		// each machine runs.
		role := "control-plane"
		if i >= 3 {
			role = "worker"
		}
		// The root is shared with the machine at the same path.
		fmt.Fprintf(&list, "\n- {name: %s, role: %s, extraMounts: [{hostPath: %s, containerPath: %s}]}", n.name, role, root, root)
	}
	l := newBootLab(t, name, subnet, podSubnetOf(subnet), list.String()+"\n")
	var configs [][]byte
	for i, n := range nodes {
		n.addr, n.lab = l.Cluster.Address(i).String(), l.Cluster
		n.netns = filepath.Join("/run/netns", l.Cluster.Netns(n.name))
		n.config = n.writeConfig(t, "kubeboot.yaml", nil)
		configs = append(configs, readFile(t, n.config))
	}
	for _, v := range versions {
		configs = append(configs, readFile(t, nodes[0].writeConfig(t, "images-"+v+".yaml", map[string]any{"kubernetesVersion": v})))
	}
	l.boot(t, lab.Inputs{ImageConfigs: configs})
	for _, n := range nodes {
		n.m = l.machine(t, n.name)
		// Registered after the lab's: it runs while the machine's disk
		// is there.
		t.Cleanup(func() {
			if t.Failed() {
				n.dumpLogs()
			}
		})
	}
	return nodes
}

// podSubnetOf is the pod network of the lab of a node test on subnet
// 10.89.X.0/24: 10.X.0.0/16, which no other lab of the suite has (the
// registry refuses a lab whose pod network another's overlaps).
func podSubnetOf(subnet string) string {
	return fmt.Sprintf("10.%d.0.0/16", netip.MustParsePrefix(subnet).Addr().As4()[2])
}

// writeConfig writes the node template adapted to this node, with edits
// (dotted field path -> value) applied, and returns its path.
func (n *node) writeConfig(t *testing.T, file string, edits map[string]any) string {
	t.Helper()
	text := strings.NewReplacer("DIR", n.dir, "NAME", n.name, "ADDRESS", n.addr, "PODSUBNET", n.lab.PodSubnet).Replace(nodeTemplate)
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("parse the node template: %v", err)
	}
	for path, value := range edits {
		setField(cfg, path, value)
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(n.root, file)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// setField sets a dotted field path in a decoded YAML document.
func setField(doc map[string]any, path string, value any) {
	keys := strings.Split(path, ".")
	for _, k := range keys[:len(keys)-1] {
		child, ok := doc[k].(map[string]any)
		if !ok {
			child = map[string]any{}
			doc[k] = child
		}
		doc = child
	}
	doc[keys[len(keys)-1]] = value
}

// path is a path under the node's directory.
func (n *node) path(rel string) string { return filepath.Join(n.dir, rel) }

func (n *node) manifestPath(component string) string {
	return n.path(filepath.Join("manifests", component+".yaml"))
}

// command is argv run in the node's machine, in a process group of its
// own, so that killing the group kills the command inside too.
func (n *node) command(t *testing.T, ctx context.Context, argv ...string) *exec.Cmd {
	t.Helper()
	cmd, err := n.m.Command(ctx, argv...)
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd
}

// kubeboot runs kubeboot in the node's machine, as an operator does.
func (n *node) kubeboot(t *testing.T, args ...string) result {
	t.Helper()
	return n.run(t, append([]string{"kubeboot"}, args...)...)
}

// run runs argv in the node's machine to completion, within
// commandTimeout.
func (n *node) run(t *testing.T, argv ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	return run(t, ctx, n.command(t, ctx, argv...))
}

// up runs kubeboot init with the node's config and JSON output.
func (n *node) up(t *testing.T) result {
	t.Helper()
	return n.kubeboot(t, "init", "--config", n.config, "-o", "json")
}

// join runs kubeboot join --control-plane with the node's config, JSON
// output and more arguments (the cluster secrets).
func (n *node) join(t *testing.T, more ...string) result {
	t.Helper()
	return n.kubeboot(t, append([]string{"join", "--control-plane", "--config", n.config, "-o", "json"}, more...)...)
}

// kubectl runs kubectl with the node's admin.conf; it fails the test on a
// non-zero exit unless the caller polls (see kubectlErr).
func (n *node) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := n.kubectlErr(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kubectlErr runs the host's kubectl with the node's admin.conf, in the
// node's network namespace.
func (n *node) kubectlErr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	r := n.inNetns(t, filepath.Join(binDir, "kubectl"), append([]string{"--kubeconfig", n.path("admin.conf")}, args...)...)
	if r.code != 0 {
		return r.stdout, fmt.Errorf("kubectl %s: exit %d: %s", strings.Join(args, " "), r.code, strings.TrimSpace(r.stderr))
	}
	return r.stdout, nil
}

// inNetns runs a host binary in the node's network namespace.
func (n *node) inNetns(t *testing.T, bin string, args ...string) result {
	t.Helper()
	return runCommand(t, "nsenter", append([]string{"--net=" + n.netns, "--", bin}, args...)...)
}

// crictl runs crictl in the node's machine, against its containerd.
func (n *node) crictl(t *testing.T, args ...string) result {
	t.Helper()
	const endpoint = "unix:///run/containerd/containerd.sock"
	return n.run(t, append([]string{"crictl", "--runtime-endpoint", endpoint, "--image-endpoint", endpoint, "--timeout", "10s"}, args...)...)
}

// dial opens a connection from the node's network namespace, as a
// process on the node's network would.
func (n *node) dial(network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := inNetns(n.netns, func() error {
		var err error
		conn, err = net.DialTimeout(network, addr, 10*time.Second)
		return err
	})
	return conn, err
}

// httpClient is an HTTP client whose connections are opened from the
// node's network, with cfg for TLS.
func (n *node) httpClient(cfg *tls.Config) *http.Client {
	dial := func(_ context.Context, network, addr string) (net.Conn, error) { return n.dial(network, addr) }
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, DialContext: dial, TLSClientConfig: cfg}}
}

// apiURL is the URL of path on the node's API server.
func (n *node) apiURL(path string) string {
	return "https://" + net.JoinHostPort(n.addr, "6443") + path
}

// inNetns runs fn on an OS thread that has entered the network namespace
// at path: the sockets fn opens are that namespace's. The thread goes back
// to its own namespace afterwards; one that cannot is left to end with
// the goroutine. It must not end otherwise: a process started on a
// thread that ends gets its parent-death signal (the S3 server's
// Pdeathsig) as if the test had died.
func inNetns(path string, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer func() { _ = own.Close() }()
		target, err := os.Open(path)
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer func() { _ = target.Close() }()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("enter %s: %w", path, err)
			return
		}
		err = fn()
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// runCommand runs a binary to completion, within commandTimeout.
func runCommand(t *testing.T, bin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	return run(t, ctx, exec.CommandContext(ctx, bin, args...))
}

// run runs cmd, made with ctx, to completion.
func run(t *testing.T, ctx context.Context, cmd *exec.Cmd) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatalf("run %s: %v", strings.Join(cmd.Args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish within %s\nstderr: %s", strings.Join(cmd.Args, " "), commandTimeout, r.stderr)
	}
	return r
}

// cleanup runs once the node's machine is gone: it checks that no process
// or mount of the node remains (killing and reporting any), and removes
// the root unless the test failed.
func (n *node) cleanup() {
	t := n.t
	if left := processesUnder(n.root); len(left) > 0 {
		t.Errorf("after the machine's removal, %d processes of the node remain (killed now):\n%s", len(left), describe(left))
		for _, p := range left {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
	if mounts := mountsUnder(n.root); len(mounts) > 0 {
		t.Errorf("after the machine's removal, mounts under %s remain: %s", n.root, strings.Join(mounts, ", "))
		return
	}
	if t.Failed() {
		// The etcd data is large and tells nothing the logs do not.
		_ = os.RemoveAll(n.path("etcd"))
		t.Logf("kept %s for inspection", n.root)
		return
	}
	if err := os.RemoveAll(n.root); err != nil {
		t.Errorf("remove %s: %v", n.root, err)
	}
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return []string{"(cannot read /proc/self/mountinfo: " + err.Error() + ")"}
	}
	var mounts []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			mounts = append(mounts, fields[4])
		}
	}
	return mounts
}
