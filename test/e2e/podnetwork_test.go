//go:build e2e

package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// TestPodNetwork brings up a lab whose nodes sit on two subnets, as racks
// do: cp1 on the lab's subnet, w1 on a routed subnet, the hub routing
// between them inside its own namespace. kubeboot's flannel gives each
// node its slice of the pod subnet and joins them by VXLAN, so pods on
// either reach each other by address and through a Service, with no route
// the lab set; kubeboot's enforcer applies NetworkPolicy to them.
func TestPodNetwork(t *testing.T) {
	alongside(t)
	c := startMachineCluster(t, "e2enet", "10.89.40.0/24", "10.241.0.0/16", `
- {name: cp1, role: control-plane}
- {name: w1, role: worker, subnet: 10.89.41.0/24}
routedSubnets: [10.89.41.0/24]
`)
	r := runCommand(t, kubebootBin, "lab", "up", "--cluster", c.desc, "--bin-dir", binDir, "--package", kubebootDeb)
	if r.code != 0 {
		t.Fatalf("lab up exited %d:\n%s", r.code, testsupport.LastLines(r.stderr, 40))
	}
	t.Logf("TIMING: lab up of two machines on two subnets: %s", r.took.Round(time.Millisecond))
	nodes := c.readyNodes(t, 2)
	if ip := internalIP(nodes["w1"]); ip != "10.89.41.11" {
		t.Errorf("w1's InternalIP is %s, want 10.89.41.11 on the routed subnet", ip)
	}
	if route := c.exec(t, "w1", "ip", "route", "show", "default"); !strings.Contains(route, "via 10.89.41.1") {
		t.Errorf("w1's default route is %q, want one through the hub's 10.89.41.1", route)
	}
	for name, want := range map[string]string{"flannel.alpha.coreos.com/backend-type": "vxlan", "flannel.alpha.coreos.com/public-ip": "10.89.41.11"} {
		if got := nodes["w1"].Annotations[name]; got != want {
			t.Errorf("w1's %s is %q, want %q", name, got, want)
		}
	}

	for _, node := range []string{"cp1", "w1"} {
		c.kubectl(t, "run", "net-"+node, "--image", agnhostImage, "--image-pull-policy", "Never", "--labels", "app=net,node="+node,
			"--overrides", `{"spec":{"nodeName":"`+node+`"}}`, "--", "netexec", "--http-port=8080")
	}
	c.kubectl(t, "wait", "--for=condition=Ready", "pod/net-cp1", "pod/net-w1", "--timeout=120s")
	// The Service selects net-w1 alone: both pods are app=net.
	c.kubectl(t, "expose", "pod", "net-w1", "--name", "net", "--selector", "node=w1", "--port", "80", "--target-port", "8080")
	ips := map[string]string{}
	for _, node := range []string{"cp1", "w1"} {
		ips[node] = c.kubectl(t, "get", "pod", "net-"+node, "-o", "jsonpath={.status.podIP}")
	}
	slice := func(ip string) string { return strings.Join(strings.Split(ip, ".")[:3], ".") } // a node's /24
	if !strings.HasPrefix(ips["cp1"], "10.241.") || !strings.HasPrefix(ips["w1"], "10.241.") || slice(ips["cp1"]) == slice(ips["w1"]) {
		t.Errorf("pod addresses %v, want each from its own node's slice of 10.241.0.0/16", ips)
	}
	for from, to := range map[string]string{"cp1": "w1", "w1": "cp1"} {
		got := strings.TrimSpace(c.kubectl(t, "exec", "net-"+from, "--", "curl", "-sS", "-m", "5", "http://"+ips[to]+":8080/hostname"))
		if got != "net-"+to {
			t.Errorf("from the pod on %s, %s:8080 answered %q, want net-%s", from, ips[to], got, to)
		}
	}
	eventually(t, "the Service net answering the pod on cp1", func() error {
		out, err := c.kubectlErr(t, "exec", "net-cp1", "--", "curl", "-sS", "-m", "5", "http://net.default.svc.cluster.local/hostname")
		if err == nil && strings.TrimSpace(out) != "net-w1" {
			t.Fatalf("the Service answered %q, want net-w1", out)
		}
		return err
	})

	// NetworkPolicy, enforced by kubeboot's enforcer on each node: a
	// default deny of ingress cuts net-w1 off from net-cp1, a policy
	// admitting pods labelled app=net on 8080 lets it through again, and
	// with both deleted every connection passes.
	c.kubectl(t, "-n", "kube-system", "rollout", "status", "daemonset/kubeboot-network-policy", "--timeout=120s")
	reach := func(want bool, why string) {
		t.Helper()
		eventually(t, why, func() error {
			_, err := c.kubectlErr(t, "exec", "net-cp1", "--", "curl", "-sS", "-m", "2", "http://"+ips["w1"]+":8080/hostname")
			if (err == nil) != want {
				return fmt.Errorf("net-cp1 -> net-w1: connected %v, want %v", err == nil, want)
			}
			return nil
		})
	}
	writeFile(t, filepath.Join(c.root, "deny.yaml"), "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: deny, namespace: default}\nspec:\n  podSelector: {}\n  policyTypes: [Ingress]\n")
	writeFile(t, filepath.Join(c.root, "allow.yaml"), "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: allow, namespace: default}\nspec:\n  podSelector: {matchLabels: {app: net}}\n  ingress:\n  - from: [{podSelector: {matchLabels: {app: net}}}]\n    ports: [{port: 8080}]\n")
	c.kubectl(t, "apply", "-f", filepath.Join(c.root, "deny.yaml"))
	reach(false, "a default deny cutting net-w1 off")
	c.kubectl(t, "apply", "-f", filepath.Join(c.root, "allow.yaml"))
	reach(true, "the policy admitting app=net on 8080")
	c.kubectl(t, "delete", "networkpolicy", "allow")
	reach(false, "the default deny alone again")
	c.kubectl(t, "delete", "networkpolicy", "deny")
	reach(true, "every connection passing once the policies are gone")
	if table := c.exec(t, "w1", "nft", "list", "table", "inet", "kubeboot-network-policy"); !strings.Contains(table, "chain forward") {
		t.Errorf("w1 has no table inet kubeboot-network-policy:\n%s", table)
	}
}
