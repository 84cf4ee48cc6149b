//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// TestDualStackLab brings up a dual-stack lab, as examples/dualstack.yaml
// describes one: each node has an IPv4 and an IPv6 address, which its
// kubelet reports, and a pod range of each family; pods get an address of
// each family and reach each other across nodes over IPv6; a Service that
// requires both families answers on both of its cluster IPs; and
// kubeboot's enforcer applies NetworkPolicy to IPv6 as to IPv4.
func TestDualStackLab(t *testing.T) {
	alongside(t)
	c := startMachineCluster(t, "e2eds", "10.89.44.0/24,fd89:0:0:44::/64", "10.238.0.0/16,fd10:238::/56", `
- {name: cp1, role: control-plane}
- {name: w1, role: worker}
serviceSubnet: 10.96.0.0/12,fd10:96::/112
`)
	r := runCommand(t, kubebootBin, "lab", "up", "--cluster", c.desc, "--bin-dir", binDir, "--package", kubebootDeb)
	if r.code != 0 {
		t.Fatalf("lab up exited %d:\n%s", r.code, testsupport.LastLines(r.stderr, 40))
	}
	t.Logf("TIMING: lab up of two dual-stack machines: %s", r.took.Round(time.Millisecond))
	nodes := c.readyNodes(t, 2)
	for name, want := range map[string][]string{"cp1": {"10.89.44.10", "fd89:0:0:44::a"}, "w1": {"10.89.44.11", "fd89:0:0:44::b"}} {
		if got := internalIPs(nodes[name]); !slices.Equal(got, want) {
			t.Errorf("%s's InternalIPs are %v, want %v", name, got, want)
		}
		if cidrs := nodes[name].Spec.PodCIDRs; len(cidrs) != 2 || !strings.HasPrefix(cidrs[0], "10.238.") || !strings.HasPrefix(cidrs[1], "fd10:238:") {
			t.Errorf("%s's pod CIDRs are %v, want one of 10.238.0.0/16 and one of fd10:238::/56", name, cidrs)
		}
	}

	for _, node := range []string{"cp1", "w1"} {
		c.kubectl(t, "run", "net-"+node, "--image", agnhostImage, "--image-pull-policy", "Never", "--labels", "app=net,node="+node,
			"--overrides", `{"spec":{"nodeName":"`+node+`"}}`, "--", "netexec", "--http-port=8080")
	}
	c.kubectl(t, "wait", "--for=condition=Ready", "pod/net-cp1", "pod/net-w1", "--timeout=120s")
	ips := map[string][]string{}
	for _, node := range []string{"cp1", "w1"} {
		ips[node] = strings.Fields(c.kubectl(t, "get", "pod", "net-"+node, "-o", `jsonpath={range .status.podIPs[*]}{.ip}{" "}{end}`))
		if len(ips[node]) != 2 || !strings.HasPrefix(ips[node][0], "10.238.") || !strings.HasPrefix(ips[node][1], "fd10:238:") {
			t.Fatalf("net-%s's pod IPs are %v, want one of each family, from the pod subnet", node, ips[node])
		}
	}
	url := func(ip, path string) string {
		return "http://" + netip.AddrPortFrom(netip.MustParseAddr(ip), 8080).String() + path
	}
	// Each check is retried, as the Service's below: an exec stream the
	// API server loses ("error: EOF") is not the pod network's answer,
	// while a wrong answer fails at once.
	for from, to := range map[string]string{"cp1": "w1", "w1": "cp1"} {
		eventually(t, "the pod on "+from+" reaching net-"+to+" over IPv6", func() error {
			out, err := c.kubectlErr(t, "exec", "net-"+from, "--", "curl", "-sS", "-m", "5", url(ips[to][1], "/hostname"))
			if err == nil && strings.TrimSpace(out) != "net-"+to {
				t.Fatalf("from the pod on %s, [%s]:8080 answered %q, want net-%s", from, ips[to][1], out, to)
			}
			return err
		})
	}
	// A host-network pod has both of its node's addresses.
	proxy := c.kubectl(t, "-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-proxy", "--field-selector", "spec.nodeName=w1",
		"-o", `jsonpath={range .items[0].status.podIPs[*]}{.ip}{" "}{end}`)
	if got := strings.Fields(proxy); !slices.Equal(got, []string{"10.89.44.11", "fd89:0:0:44::b"}) {
		t.Errorf("kube-proxy's pod on w1 has pod IPs %v, want both of w1's addresses", got)
	}

	// A Service that requires both families has a cluster IP of each,
	// and both lead to its pod.
	writeFile(t, filepath.Join(c.root, "svc.yaml"), "apiVersion: v1\nkind: Service\nmetadata: {name: net, namespace: default}\n"+
		"spec:\n  ipFamilyPolicy: RequireDualStack\n  selector: {node: w1}\n  ports: [{port: 8080}]\n")
	c.kubectl(t, "apply", "-f", filepath.Join(c.root, "svc.yaml"))
	clusterIPs := strings.Fields(c.kubectl(t, "get", "service", "net", "-o", `jsonpath={range .spec.clusterIPs[*]}{@}{" "}{end}`))
	if len(clusterIPs) != 2 || !strings.HasPrefix(clusterIPs[0], "10.") || !strings.HasPrefix(clusterIPs[1], "fd10:96::") {
		t.Fatalf("the Service's cluster IPs are %v, want one of 10.96.0.0/12 and one of fd10:96::/112", clusterIPs)
	}
	for _, ip := range clusterIPs {
		eventually(t, "the Service answering on "+ip, func() error {
			out, err := c.kubectlErr(t, "exec", "net-cp1", "--", "curl", "-sS", "-m", "5", url(ip, "/hostname"))
			if err == nil && strings.TrimSpace(out) != "net-w1" {
				t.Fatalf("the Service's %s answered %q, want net-w1", ip, out)
			}
			return err
		})
	}

	// NetworkPolicy over IPv6: a default deny of ingress cuts net-w1
	// off, and deleting it lets net-cp1 through again.
	c.kubectl(t, "-n", "kube-system", "rollout", "status", "daemonset/kubeboot-network-policy", "--timeout=120s")
	reach := func(want bool, why string) {
		t.Helper()
		eventually(t, why, func() error {
			_, err := c.kubectlErr(t, "exec", "net-cp1", "--", "curl", "-sS", "-m", "2", url(ips["w1"][1], "/hostname"))
			if (err == nil) != want {
				return fmt.Errorf("net-cp1 -> [%s]:8080: connected %v, want %v", ips["w1"][1], err == nil, want)
			}
			return nil
		})
	}
	writeFile(t, filepath.Join(c.root, "deny.yaml"), "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: deny, namespace: default}\nspec:\n  podSelector: {}\n  policyTypes: [Ingress]\n")
	c.kubectl(t, "apply", "-f", filepath.Join(c.root, "deny.yaml"))
	reach(false, "a default deny cutting net-w1 off over IPv6")
	c.kubectl(t, "delete", "networkpolicy", "deny")
	reach(true, "net-w1 reachable over IPv6 once the policy is gone")
}

// internalIPs are the Node's InternalIP addresses, in the kubelet's order.
func internalIPs(n corev1.Node) []string {
	var ips []string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ips = append(ips, a.Address)
		}
	}
	return ips
}
