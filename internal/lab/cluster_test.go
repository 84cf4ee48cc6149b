package lab_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/lab"
)

func writeDescription(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const header = "apiVersion: kubeboot.io/v1alpha1\nkind: LabCluster\nname: lab\ndir: /tmp/kb-lab\n"

// TestLoadClusterErrors: each mistake is named with its file, field and fix.
func TestLoadClusterErrors(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"unknown field", header + "nodez: []\n", `unknown field "nodez"`},
		{"long name", strings.Replace(header, "name: lab", "name: averyverylongname", 1) + "nodes: [{name: a, role: control-plane}]\n", "name: \"averyverylongname\": want a lower-case DNS label of at most 12 characters"},
		{"relative dir", strings.Replace(header, "/tmp/kb-lab", "lab", 1) + "nodes: [{name: a, role: control-plane}]\n", "dir: \"lab\": want an absolute directory"},
		{"subnet", header + "subnet: 10.89.0.0/16\nnodes: [{name: a, role: control-plane}]\n", "subnet: \"10.89.0.0/16\": want an IPv4 /24"},
		{"no control plane", header + "nodes: []\n", "nodes: 0 control-plane nodes: want 1 to 3"},
		{"worker first", header + "nodes: [{name: w, role: worker}, {name: a, role: control-plane}]\n", "nodes[0].role: the first node must be a control-plane node"},
		{"twice", header + "nodes: [{name: a, role: control-plane}, {name: a, role: control-plane}]\n", `nodes[1].name: "a" is listed twice`},
		{"role", header + "nodes: [{name: a, role: master}]\n", `nodes[0].role: "master": want control-plane or worker`},
		{"join of a control plane", header + "nodes: [{name: a, role: control-plane, join: kubeadm}]\n", "nodes[0].join: a control-plane node joins with kubeboot's certificate bundle"},
		{"join", header + "nodes: [{name: a, role: control-plane}, {name: w, role: worker, join: kubeadmin}]\n", `nodes[1].join: "kubeadmin": want kubeboot or kubeadm`},
		{"version", header + "kubernetesVersion: 1.35\nnodes: [{name: a, role: control-plane}]\n", `kubernetesVersion: "1.35": want a release like v1.35.4`},
		{"init", header + "nodes: [{name: a, role: control-plane, init: kubeadmin}]\n", `nodes[0].init: "kubeadmin": want kubeboot or kubeadm`},
		{"init of a second node", header + "nodes: [{name: a, role: control-plane}, {name: b, role: control-plane, init: kubeadm}]\n", "nodes[1].init: only the first node inits the cluster"},
		{"routed subnet size", header + "routedSubnets: [10.89.3.0/23]\nnodes: [{name: a, role: control-plane}]\n", `routedSubnets[0]: "10.89.3.0/23": want an IPv4 /24`},
		{"routed subnet overlaps", header + "routedSubnets: [10.89.0.0/24]\nnodes: [{name: a, role: control-plane}]\n", `routedSubnets[0]: "10.89.0.0/24" overlaps subnet 10.89.0.0/24`},
		{"routed subnets overlap", header + "routedSubnets: [10.89.3.0/24, 10.89.3.0/24]\nnodes: [{name: a, role: control-plane}]\n", `routedSubnets[1]: "10.89.3.0/24" overlaps routedSubnets[0] 10.89.3.0/24`},
		{"node subnet", header + "nodes: [{name: a, role: control-plane, subnet: 10.89.4.0/24}]\n", `nodes[0].subnet: "10.89.4.0/24" is neither the lab's subnet nor one of its routedSubnets`},
		{"subnet6 size", header + "subnet: '10.89.0.0/24,fd89::/56'\npodSubnet: '10.244.0.0/16,fd10:244::/56'\nserviceSubnet: '10.96.0.0/12,fd10:96::/112'\nnodes: [{name: a, role: control-plane}]\n",
			`subnet: "10.89.0.0/24,fd89::/56": want an IPv4 /24 network address, like 10.89.0.0/24, and for a dual-stack lab an IPv6 /64 after it`},
		{"IPv6 first", header + "subnet: 'fd89::/64,10.89.0.0/24'\nnodes: [{name: a, role: control-plane}]\n", `subnet: "fd89::/64,10.89.0.0/24": want an IPv4 /24`},
		{"dual-stack nodes, IPv4 pods", header + "subnet: '10.89.0.0/24,fd89::/64'\nserviceSubnet: '10.96.0.0/12,fd10:96::/112'\nnodes: [{name: a, role: control-plane}]\n",
			`podSubnet: "10.244.0.0/16": want an IPv4 network of /16 or larger, like 10.244.0.0/16, and after it an IPv6 network of /48 to /63`},
		{"IPv6 pods of a /64", header + "subnet: '10.89.0.0/24,fd89::/64'\npodSubnet: '10.244.0.0/16,fd10:244::/64'\nserviceSubnet: '10.96.0.0/12,fd10:96::/112'\nnodes: [{name: a, role: control-plane}]\n",
			`podSubnet: "10.244.0.0/16,fd10:244::/64": want`},
		{"dual-stack pods, IPv4 nodes", header + "podSubnet: '10.244.0.0/16,fd10:244::/56'\nnodes: [{name: a, role: control-plane}]\n", `podSubnet: "10.244.0.0/16,fd10:244::/56": want an IPv4 network`},
		{"dual-stack without services", header + "subnet: '10.89.0.0/24,fd89::/64'\npodSubnet: '10.244.0.0/16,fd10:244::/56'\nnodes: [{name: a, role: control-plane}]\n",
			`serviceSubnet: "": want an IPv4 and an IPv6 range, like 10.96.0.0/12,fd10:96::/112: the subnet is dual-stack`},
		{"dual-stack services, IPv4 nodes", header + "serviceSubnet: '10.96.0.0/12,fd10:96::/112'\nnodes: [{name: a, role: control-plane}]\n", `serviceSubnet: "10.96.0.0/12,fd10:96::/112": want an IPv4 range`},
		{"dual-stack with routed subnets", header + "subnet: '10.89.0.0/24,fd89::/64'\npodSubnet: '10.244.0.0/16,fd10:244::/56'\nserviceSubnet: '10.96.0.0/12,fd10:96::/112'\nroutedSubnets: [10.89.3.0/24]\nnodes: [{name: a, role: control-plane}]\n",
			"routedSubnets: a dual-stack lab has one subnet"},
		{"kubeadm init with workers", header + "nodes: [{name: a, role: control-plane, init: kubeadm}, {name: w, role: worker}]\n", "nodes[0].init: a cluster that kubeadm inits is that one node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeDescription(t, tc.text)
			_, err := lab.LoadCluster(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("got %v, want an error naming %s and %q", err, path, tc.want)
			}
		})
	}
}

// TestJoins: a worker joins with kubeboot unless its description says
// kubeadm.
func TestJoins(t *testing.T) {
	c, err := lab.LoadCluster(writeDescription(t, header+"nodes: [{name: cp1, role: control-plane}, {name: w1, role: worker}, {name: w2, role: worker, join: kubeadm}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Nodes[1].Join != lab.JoinKubeboot || c.Nodes[2].Join != lab.JoinKubeadm {
		t.Errorf("joins %q and %q, want kubeboot (the default) and kubeadm", c.Nodes[1].Join, c.Nodes[2].Join)
	}
}

// TestRoutedSubnets: a node on a routed subnet gets an address there, .10
// plus its index as every node, and the hub's address on that subnet as
// its gateway; the others stay on the lab's subnet.
func TestRoutedSubnets(t *testing.T) {
	c, err := lab.LoadCluster(writeDescription(t, header+"subnet: 10.89.2.0/24\nroutedSubnets: [10.89.3.0/24]\n"+
		"nodes: [{name: cp1, role: control-plane}, {name: w1, role: worker, subnet: 10.89.3.0/24}, {name: w2, role: worker, subnet: 10.89.2.0/24}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct{ address, gateway string }{{"10.89.2.10", "10.89.2.1"}, {"10.89.3.11", "10.89.3.1"}, {"10.89.2.12", "10.89.2.1"}} {
		if got, gw := c.Address(i).String(), c.Gateway(i).String(); got != want.address || gw != want.gateway {
			t.Errorf("node %d: address %s via %s, want %s via %s", i, got, gw, want.address, want.gateway)
		}
	}
	if hub := c.HubAddress().String(); hub != "10.89.2.1" {
		t.Errorf("the hub (load balancer) is on %s, want the lab's subnet's 10.89.2.1", hub)
	}
}

// TestExamplesLoad: every lab description in examples/ loads as written.
func TestExamplesLoad(t *testing.T) {
	paths, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	loaded := 0
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "kind: LabCluster") {
			continue // a node's configuration, not a lab's
		}
		if _, err := lab.LoadCluster(path); err != nil {
			t.Errorf("%s: %v", path, err)
		}
		loaded++
	}
	if loaded < 3 {
		t.Errorf("loaded %d lab descriptions, want examples/cluster.yaml, machines.yaml and racks.yaml at least", loaded)
	}
}
