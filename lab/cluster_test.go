package lab_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/lab"
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

// TestNodeConfig: the first node inits, the others join through the etcd
// members before them and the load balancer; every path is the node's own.
func TestNodeConfig(t *testing.T) {
	c, err := lab.LoadCluster(writeDescription(t, header+"nodes: [{name: cp1, role: control-plane}, {name: cp2, role: control-plane}, {name: cp3, role: control-plane}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	var third map[string]any
	data, err := c.NodeConfig(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &third); err != nil {
		t.Fatal(err)
	}
	if third["kind"] != "JoinConfiguration" || third["controlPlaneEndpoint"] != "10.89.0.1:6443" {
		t.Errorf("cp3: kind %v endpoint %v, want a JoinConfiguration through the hub's load balancer", third["kind"], third["controlPlaneEndpoint"])
	}
	if join, ok := third["join"]; ok {
		t.Errorf("cp3's join: %v, want none: the join reads the etcd members from the cluster", join)
	}
	node := third["node"].(map[string]any)
	if node["name"] != "cp3" || node["advertiseAddress"] != "10.89.0.12" {
		t.Errorf("cp3's node: %v", node)
	}
	if !strings.Contains(string(data), "/tmp/kb-lab/cp3/pki") || strings.Contains(string(data), "/cp1/") {
		t.Errorf("cp3's paths are not its own:\n%s", data)
	}
	first, _ := c.NodeConfig(0)
	if !strings.Contains(string(first), "kind: ClusterConfiguration") {
		t.Errorf("cp1 does not init:\n%s", first)
	}
	// Every node's kube-proxy leaves the host's conntrack table alone.
	for name, data := range map[string][]byte{"cp1": first, "cp3": data} {
		var cfg struct {
			Addons struct {
				KubeProxy struct {
					ExtraConfig map[string]any `json:"extraConfig"`
				} `json:"kubeProxy"`
			}
		}
		if err := yaml.Unmarshal(data, &cfg); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{"conntrack": map[string]any{"maxPerCore": float64(0)}}
		if diff := cmp.Diff(want, cfg.Addons.KubeProxy.ExtraConfig); diff != "" {
			t.Errorf("%s's addons.kubeProxy.extraConfig (-want +got):\n%s", name, diff)
		}
	}
	if strings.Contains(string(first), "kubernetesVersion") {
		t.Errorf("cp1 names a version the description does not:\n%s", first)
	}
	c.KubernetesVersion = "v1.35.4"
	for i := range c.Nodes {
		if data, _ := c.NodeConfig(i); !strings.Contains(string(data), "kubernetesVersion: v1.35.4") {
			t.Errorf("node %d does not run the description's kubernetesVersion:\n%s", i, data)
		}
	}
}

// TestWorkerConfig: a worker's WorkerConfiguration discovers the cluster
// through its endpoint with the token and the CA's hash, and keeps every
// path in the worker's own dir; a worker joins with kubeboot unless its
// description says kubeadm.
func TestWorkerConfig(t *testing.T) {
	c, err := lab.LoadCluster(writeDescription(t, header+"nodes: [{name: cp1, role: control-plane}, {name: w1, role: worker}, {name: w2, role: worker, join: kubeadm}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Nodes[1].Join != lab.JoinKubeboot || c.Nodes[2].Join != lab.JoinKubeadm {
		t.Errorf("joins %q and %q, want kubeboot (the default) and kubeadm", c.Nodes[1].Join, c.Nodes[2].Join)
	}
	data, err := c.WorkerConfig(1, lab.Discovery{Token: "abcdef.0123456789abcdef", CAHash: "sha256:00ff"})
	if err != nil {
		t.Fatal(err)
	}
	var w struct {
		Kind      string
		Node      struct{ Name, Address string }
		Discovery struct {
			APIServerEndpoint string
			Token             string
			CACertHashes      []string
		}
		Paths struct{ KubeconfigDir string }
	}
	if err := yaml.Unmarshal(data, &w); err != nil {
		t.Fatal(err)
	}
	if w.Kind != "WorkerConfiguration" || w.Node.Name != "w1" || w.Node.Address != "10.89.0.11" {
		t.Errorf("w1: kind %s, node %+v", w.Kind, w.Node)
	}
	if w.Discovery.APIServerEndpoint != "10.89.0.10:6443" || w.Discovery.Token != "abcdef.0123456789abcdef" || len(w.Discovery.CACertHashes) != 1 {
		t.Errorf("w1's discovery: %+v, want cp1's API server, the token and the hash", w.Discovery)
	}
	if w.Paths.KubeconfigDir != "/tmp/kb-lab/w1" || strings.Contains(string(data), "/cp1") {
		t.Errorf("w1's paths are not its own:\n%s", data)
	}
	if _, err := c.WorkerConfig(0, lab.Discovery{}); err == nil {
		t.Error("a control-plane node got a WorkerConfiguration")
	}
	if _, err := c.NodeConfig(1); err == nil {
		t.Error("a worker got a control-plane configuration")
	}
}

// TestKubeadmInitConfig: kubeadm inits the same cluster as kubeboot would,
// on the node's address and runtime, with the lab kubelet's settings and
// patches, and ECDSA keys as kubeboot's.
func TestKubeadmInitConfig(t *testing.T) {
	c, err := lab.LoadCluster(writeDescription(t, header+"subnet: 10.89.5.0/24\nnodes: [{name: cp1, role: control-plane, init: kubeadm}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := c.KubeadmInitConfig()
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(data), "---\n")
	if len(docs) != 3 {
		t.Fatalf("%d documents, want InitConfiguration, ClusterConfiguration and KubeletConfiguration:\n%s", len(docs), data)
	}
	for _, want := range []string{
		"advertiseAddress: 10.89.5.10", "name: cp1", "criSocket: unix:///tmp/kb-lab/cp1/cri.sock", "taints: []",
		"directory: /tmp/kb-lab/cp1/lab/kubeadm-patches", "kubernetesVersion: v1.36.3", "encryptionAlgorithm: ECDSA-P256",
		"podSubnet: 10.244.0.0/16", "failSwapOn: false", "cgroupsPerQOS: false", "imageGCHighThresholdPercent: 100",
	} {
		if !strings.Contains(string(data), want) {
			t.Errorf("no %q in:\n%s", want, data)
		}
	}
	if strings.Contains(docs[2], "volumePluginDir") {
		t.Errorf("the KubeletConfiguration names the node's paths, which the patches set:\n%s", docs[2])
	}
	other, err := lab.LoadCluster(writeDescription(t, header+"nodes: [{name: cp1, role: control-plane}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.KubeadmInitConfig(); err == nil {
		t.Error("a kubeadm configuration for a node that kubeboot inits")
	}
}
