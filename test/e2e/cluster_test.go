//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// agnhostImage is the workload image the lab builds (lab.AgnhostImage).
const agnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"

// labCluster is a lab cluster brought up from a description.
type labCluster struct {
	name, root, desc, kubeconfig string
}

// checkPodNetwork checks, on a cluster's life's fleet, what a cluster on
// the real runtime must do: the Nodes have their own addresses; pods (not
// on the host network) get addresses from their node's podCIDR and reach
// each other across nodes; kubectl logs, exec and port-forward reach a pod
// through the API servers behind the load balancer, each of which verifies
// the kubelets' serving certificates against the cluster CA.
func checkPodNetwork(t *testing.T, c *machineCluster) {
	t.Helper()
	nodes := c.readyNodes(t, len(c.lab.Cluster.Nodes))
	for i, n := range c.lab.Cluster.Nodes {
		if got, want := internalIP(nodes[n.Name]), c.lab.Cluster.Address(i).String(); got != want {
			t.Errorf("node %s has InternalIP %q, want its own address %s", n.Name, got, want)
		}
	}
	pods := c.runWebPods(t, []string{"w1", "w2"})

	t.Run("pods get addresses from their node's podCIDR", func(t *testing.T) {
		for n, pod := range pods {
			_, cidr, err := net.ParseCIDR(nodes[n].Spec.PodCIDR)
			if err != nil || !cidr.Contains(net.ParseIP(pod.Status.PodIP)) || pod.Spec.HostNetwork {
				t.Errorf("pod %s on %s: IP %s, node podCIDR %q (%v), host network %v", pod.Name, n, pod.Status.PodIP, nodes[n].Spec.PodCIDR, err, pod.Spec.HostNetwork)
			}
		}
	})
	t.Run("a pod reaches a pod on the other node; exec through the API server", func(t *testing.T) {
		for from, to := range map[string]string{"w1": "w2", "w2": "w1"} {
			target := net.JoinHostPort(pods[to].Status.PodIP, "8080")
			if out, err := c.kubectlErr(t, "exec", "web-"+from, "--", "/agnhost", "connect", target, "--timeout=5s"); err != nil {
				t.Errorf("from web-%s to web-%s (%s): %v %s", from, to, target, err, out)
			}
		}
	})
	t.Run("logs through the API server", func(t *testing.T) {
		for n := range pods {
			if out, err := c.kubectlErr(t, "logs", "web-"+n); err != nil || !strings.Contains(out, "8080") {
				t.Errorf("kubectl logs web-%s: %v: %q", n, err, out)
			}
		}
	})
	t.Run("port-forward through the API server", func(t *testing.T) {
		for n := range pods {
			if got := c.portForwardGet(t, "web-"+n, "/hostname"); got != "web-"+n {
				t.Errorf("GET /hostname through port-forward to web-%s: %q", n, got)
			}
		}
	})
	t.Run("the API servers verify kubelets' serving certificates", func(t *testing.T) {
		for _, n := range []string{"cp1", "cp2"} {
			manifest, err := os.ReadFile(filepath.Join(c.machine(t, n).Root(), "etc/kubernetes/manifests/kube-apiserver.yaml"))
			if err != nil || !strings.Contains(string(manifest), "--kubelet-certificate-authority=/etc/kubernetes/pki/ca.crt") {
				t.Errorf("%s's API server does not verify kubelets against the cluster CA (%v)", n, err)
			}
		}
	})
}

// readyNodes waits until the cluster has count Nodes, all Ready, and
// returns them by name; a Node that is not Ready says why (and a failed
// test logs each machine's journal).
func (c *labCluster) readyNodes(t *testing.T, count int) map[string]corev1.Node {
	t.Helper()
	nodes := map[string]corev1.Node{}
	eventually(t, fmt.Sprintf("%d nodes Ready", count), func() error {
		var list corev1.NodeList
		if err := c.kubectlJSON(t, &list, "get", "nodes"); err != nil {
			return err
		}
		for _, n := range list.Items {
			nodes[n.Name] = n
			if !nodeReady(n) {
				return fmt.Errorf("node %s not Ready: %s", n.Name, readyMessage(n))
			}
		}
		if len(list.Items) != count {
			return fmt.Errorf("%d nodes", len(list.Items))
		}
		return nil
	})
	return nodes
}

// runWebPods runs an agnhost netexec pod (HTTP on 8080) named web-<node>
// on each node, and returns them by node once they run with an IP.
func (c *labCluster) runWebPods(t *testing.T, nodes []string) map[string]corev1.Pod {
	t.Helper()
	for _, n := range nodes {
		c.kubectl(t, "run", "web-"+n, "--image", agnhostImage, "--image-pull-policy", "Never",
			"--overrides", `{"spec":{"nodeName":"`+n+`"}}`, "--", "netexec", "--http-port=8080")
	}
	pods := map[string]corev1.Pod{}
	eventually(t, "an agnhost pod Running with an IP on each node", func() error {
		for _, n := range nodes {
			var pod corev1.Pod
			if err := c.kubectlJSON(t, &pod, "get", "pod", "web-"+n); err != nil {
				return err
			}
			if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
				return fmt.Errorf("pod %s: %s, IP %q", pod.Name, pod.Status.Phase, pod.Status.PodIP)
			}
			pods[n] = pod
		}
		return nil
	})
	return pods
}

// writeLabDescription writes, under a new root, the description of a lab
// in root/c of the nodes (a YAML list, then any more of the description's
// fields), and returns the root and the description's path.
func writeLabDescription(t *testing.T, name, subnet, podSubnet, nodes string) (root, desc string) {
	t.Helper()
	root, err := os.MkdirTemp("", "kb-cl-")
	if err != nil {
		t.Fatal(err)
	}
	desc = filepath.Join(root, "cluster.yaml")
	text := fmt.Sprintf("apiVersion: kubeboot.io/v1alpha1\nkind: LabCluster\nname: %s\ndir: %s\nsubnet: %s\npodSubnet: %s\nnodes:%s",
		name, filepath.Join(root, "c"), subnet, podSubnet, nodes)
	if err := os.WriteFile(desc, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return root, desc
}

// startCluster writes a lab description of the nodes (a YAML list) under
// a new root, and registers the cleanup that brings the lab down and
// checks that it left nothing behind; the test runs lab up itself.
func startCluster(t *testing.T, name, subnet, podSubnet, nodes string) *labCluster {
	t.Helper()
	root, desc := writeLabDescription(t, name, subnet, podSubnet, nodes)
	c := &labCluster{name: name, root: root, desc: desc, kubeconfig: filepath.Join(root, "c", "kubeconfig")}
	before := hostNetworkState(t, name)
	t.Cleanup(func() {
		if r := runCommand(t, kubebootBin, "lab", "down", "--cluster", c.desc); r.code != 0 {
			t.Errorf("lab down --cluster exited %d:\n%s", r.code, r.stderr)
		}
		c.checkGone(t, before)
	})
	return c
}

func nodeReady(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func internalIP(n corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// kubectlErr runs kubectl through the lab's host kubeconfig.
func (c *labCluster) kubectlErr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	r := runCommand(t, filepath.Join(binDir, "kubectl"), append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
	if r.code != 0 {
		return r.stdout, fmt.Errorf("kubectl %s: exit %d: %s", strings.Join(args, " "), r.code, strings.TrimSpace(r.stderr))
	}
	return r.stdout, nil
}

func (c *labCluster) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.kubectlErr(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (c *labCluster) kubectlJSON(t *testing.T, into any, args ...string) error {
	t.Helper()
	out, err := c.kubectlErr(t, append(args, "-o", "json")...)
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(out), into)
}

// portForwardGet forwards a free local port to the pod's port 8080 and
// GETs path through it.
func (c *labCluster) portForwardGet(t *testing.T, pod, path string) string {
	t.Helper()
	port := testsupport.FreePort(t)
	cmd := exec.Command(filepath.Join(binDir, "kubectl"), "--kubeconfig", c.kubeconfig, "port-forward", "--address", "127.0.0.1", "pod/"+pod, fmt.Sprintf("%d:8080", port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var body string
	eventually(t, "port-forward to "+pod+" answers", func() error {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		data, err := io.ReadAll(resp.Body)
		body = string(data)
		return err
	})
	return body
}

// checkGone compares the host with its state before lab up and checks
// that nothing of the lab remains.
func (c *labCluster) checkGone(t *testing.T, before netState) {
	t.Helper()
	after := hostNetworkState(t, c.name)
	for _, d := range []struct {
		what          string
		before, after []string
	}{{"network namespaces", before.namespaces, after.namespaces}, {"links", before.links, after.links}, {"iptables rules", before.rules, after.rules}, {"nftables tables", before.tables, after.tables}} {
		if !slices.Equal(d.before, d.after) {
			t.Errorf("after lab down, the host's %s differ:\nbefore: %q\nafter:  %q", d.what, d.before, d.after)
		}
	}
	if left := processesUnder(c.root); len(left) > 0 {
		t.Errorf("after lab down, %d processes of the lab remain:\n%s", len(left), describe(left))
	}
	if mounts := mountsUnder(c.root); len(mounts) > 0 {
		t.Errorf("after lab down, mounts remain: %v", mounts)
		return
	}
	if _, err := os.Stat(filepath.Join(c.root, "c")); err == nil {
		t.Errorf("after lab down, the lab's directory %s remains", filepath.Join(c.root, "c"))
	}
	if !t.Failed() {
		_ = os.RemoveAll(c.root)
	}
}
