package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/config"
)

// apiServerPort is the port of every API server of a lab cluster, and of
// its load balancer.
const apiServerPort = 6443

// NodeConfigPath is where lab up writes a node's kubeboot configuration.
func (c *Cluster) NodeConfigPath(node string) string {
	return filepath.Join(c.NodeDir(node), "kubeboot.yaml")
}

// Endpoint is the cluster's API endpoint for its nodes: the load balancer
// in the hub in front of several control-plane nodes, else the only one's
// API server.
func (c *Cluster) Endpoint() netip.AddrPort {
	if cps := c.ControlPlanes(); len(cps) == 1 {
		return netip.AddrPortFrom(c.Address(cps[0]), apiServerPort)
	}
	return netip.AddrPortFrom(c.HubAddress(), apiServerPort)
}

// NodeConfig renders the kubeboot configuration of the cluster's i-th
// control-plane node: every path under the node's dir and its address.
// The first node's is a ClusterConfiguration; another control-plane
// node's a JoinConfiguration through the etcd members listed before it.
func (c *Cluster) NodeConfig(i int) ([]byte, error) {
	n := c.Nodes[i]
	if n.Role != RoleControlPlane {
		return nil, fmt.Errorf("%s: nodes[%d] is a worker, which joins with WorkerConfig", c.source, i)
	}
	dir := c.NodeDir(n.Name)
	cfg := map[string]any{
		"apiVersion":   "kubeboot.io/v1alpha1",
		"kind":         "ClusterConfiguration",
		"clusterName":  c.Name,
		"node":         map[string]any{"name": n.Name, "advertiseAddress": c.Address(i).String(), "controlPlaneTaint": c.hasWorkers()},
		"networking":   map[string]any{"podSubnet": c.PodSubnet},
		"etcd":         map[string]any{"local": map[string]any{"dataDir": filepath.Join(dir, "etcd"), "snapshotsDir": filepath.Join(dir, "etcd-snapshots")}},
		"certificates": map[string]any{"dir": filepath.Join(dir, "pki")},
		"paths":        map[string]any{"manifestsDir": filepath.Join(dir, "manifests"), "kubeconfigDir": dir},
		"kubelet":      nodeKubelet(dir),
		"timeouts":     map[string]any{"controlPlane": "3m"},
		"security":     map[string]any{"audit": map[string]any{"logDir": filepath.Join(dir, "audit")}},
		"addons":       map[string]any{"kubeProxy": map[string]any{"extraConfig": labKubeProxy}},
	}
	if len(c.ControlPlanes()) > 1 {
		cfg["controlPlaneEndpoint"] = c.Endpoint().String()
	}
	if c.KubernetesVersion != "" {
		cfg["kubernetesVersion"] = c.KubernetesVersion
	}
	if i > 0 {
		// The join reads the existing etcd members from the cluster.
		cfg["kind"] = "JoinConfiguration"
	}
	return yaml.Marshal(cfg)
}

// KubeadmInitConfig renders the configuration of the real `kubeadm init`
// for the cluster's first node, the same cluster as NodeConfig's:
// kubeadm's InitConfiguration, ClusterConfiguration and
// KubeletConfiguration. kubeadm's paths are its fixed ones, which the
// node's mount namespace overlays (see KubeadmNode.Isolate). The keys are
// ECDSA P-256, kubeboot's default, so that the comparison times the
// bring-up rather than RSA key generation.
func (c *Cluster) KubeadmInitConfig() ([]byte, error) {
	n := c.Nodes[0]
	if n.Init != JoinKubeadm {
		return nil, fmt.Errorf("%s: nodes[0] inits with kubeboot, which reads NodeConfig", c.source)
	}
	version := c.KubernetesVersion
	if version == "" {
		version = config.DefaultKubernetesVersion
	}
	kubelet := nodeKubelet(c.NodeDir(n.Name))["extraConfig"].(map[string]any)
	docs := []map[string]any{{
		"apiVersion":       "kubeadm.k8s.io/v1beta4",
		"kind":             "InitConfiguration",
		"localAPIEndpoint": map[string]any{"advertiseAddress": c.Address(0).String(), "bindPort": apiServerPort},
		// Without workers the node stays untainted, as NodeConfig's.
		"nodeRegistration": map[string]any{"name": n.Name, "criSocket": "unix://" + filepath.Join(c.NodeDir(n.Name), "cri.sock"), "taints": []string{}},
		"patches":          map[string]any{"directory": KubeadmNode{Dir: filepath.Join(c.NodeDir(n.Name), "lab")}.PatchesDir()},
	}, {
		"apiVersion":          "kubeadm.k8s.io/v1beta4",
		"kind":                "ClusterConfiguration",
		"clusterName":         c.Name,
		"kubernetesVersion":   version,
		"encryptionAlgorithm": "ECDSA-P256",
		"networking":          map[string]any{"podSubnet": c.PodSubnet},
	}, {
		"apiVersion": "kubelet.config.k8s.io/v1beta1",
		"kind":       "KubeletConfiguration",
	}}
	for k, v := range kubelet {
		// The patches of KubeadmNode.Patches set these for the node.
		if k != "volumePluginDir" && k != "podLogsDir" && k != "enforceNodeAllocatable" {
			docs[2][k] = v
		}
	}
	var out []byte
	for i, d := range docs {
		data, err := yaml.Marshal(d)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out = append(out, "---\n"...)
		}
		out = append(out, data...)
	}
	return out, nil
}

// labKubeProxy is what every lab cluster's kube-proxy is told on top of
// kubeboot's defaults. A lab node is a network namespace on the shared
// host, and the conntrack table's size (nf_conntrack_max and the
// nf_conntrack module's hashsize) is the host's, not the namespace's: with
// maxPerCore 0, kube-proxy leaves it as it is, as kind's nodes do, rather
// than raising it for the whole machine (or failing where it may not).
var labKubeProxy = map[string]any{"conntrack": map[string]any{"maxPerCore": 0}}

// nodeKubelet is the kubelet section of a lab node's configuration: its
// files under the node's dir, and what the real kubelet needs on a machine
// without systemd or cgroup v2 (see `kubeboot lab --help`).
func nodeKubelet(dir string) map[string]any {
	return map[string]any{
		"configFile":               filepath.Join(dir, "kubelet", "config.yaml"),
		"containerRuntimeEndpoint": "unix://" + filepath.Join(dir, "cri.sock"),
		"extraConfig": map[string]any{
			"failSwapOn":             false,
			"failCgroupV1":           false,
			"cgroupsPerQOS":          false,
			"enforceNodeAllocatable": []string{},
			"volumePluginDir":        filepath.Join(dir, "kubelet", "volume-plugins"),
			"podLogsDir":             filepath.Join(dir, "pod-logs"),
			// As kind does: a lab on a crowded disk evicts nothing and
			// collects no images.
			"evictionHard":                map[string]string{"imagefs.available": "0%", "nodefs.available": "0%", "nodefs.inodesFree": "0%"},
			"imageGCHighThresholdPercent": 100,
		},
	}
}

// Discovery is how a lab worker finds its cluster: a bootstrap token of
// the first node's and the cluster CA's hash, through Endpoint.
type Discovery struct {
	Token  string
	CAHash string
}

// WorkerConfig renders the WorkerConfiguration of the cluster's i-th node,
// a worker: its name, address and paths under the node's dir, and its
// discovery through the cluster's endpoint. kubeadm join reads its
// settings from flags; its lab node uses this file for its runtime alone.
func (c *Cluster) WorkerConfig(i int, d Discovery) ([]byte, error) {
	n := c.Nodes[i]
	if n.Role != RoleWorker {
		return nil, fmt.Errorf("%s: nodes[%d] is a control-plane node, which inits or joins with NodeConfig", c.source, i)
	}
	dir := c.NodeDir(n.Name)
	cfg := map[string]any{
		"apiVersion":   "kubeboot.io/v1alpha1",
		"kind":         "WorkerConfiguration",
		"node":         map[string]any{"name": n.Name, "address": c.Address(i).String()},
		"discovery":    map[string]any{"apiServerEndpoint": c.Endpoint().String(), "token": d.Token, "caCertHashes": []string{d.CAHash}},
		"certificates": map[string]any{"dir": filepath.Join(dir, "pki")},
		"paths":        map[string]any{"manifestsDir": filepath.Join(dir, "manifests"), "kubeconfigDir": dir},
		"kubelet":      nodeKubelet(dir),
	}
	return yaml.Marshal(cfg)
}

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
