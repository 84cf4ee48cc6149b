package lab

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/fleet"
	"github.com/kubeboot/kubeboot/internal/inputfile"
)

// ClusterKind is the kind of a lab description.
const ClusterKind = "LabCluster"

// The roles of a lab cluster's nodes: a fleet's, since the lab is brought
// up as one.
const (
	RoleControlPlane = fleet.RoleControlPlane
	RoleWorker       = fleet.RoleWorker
)

// Cluster is a lab description: the nodes of one cluster on this machine.
// Each node runs in a network namespace of its own, joined to the lab's
// bridge in the hub namespace, with an address of Subnet. The host reaches
// the cluster's API through the load balancer's port on its loopback.
type Cluster struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Name names the cluster, its hub network namespace (kb-<name>) and
	// the nodes' (kb-<name>-<node>).
	Name string `json:"name"`
	// Dir holds every node's files, in <dir>/<node>.
	Dir string `json:"dir"`
	// Subnet is the nodes' network, an IPv4 /24: the hub is .1, the nodes
	// .10, .11, ... in the order listed. A dual-stack lab lists an IPv6
	// /64 after it, comma-separated: the hub is ::1 there, the nodes ::a,
	// ::b, ...; every node then has an address of each family, which its
	// kubelet reports (node.secondaryAddress).
	Subnet string `json:"subnet"`
	// RoutedSubnets are more networks of nodes, each an IPv4 /24 on a
	// bridge of its own in the hub, whose first address is its nodes'
	// gateway: the hub routes between them and Subnet, as a router
	// between racks does. A node names its network (ClusterNode.Subnet).
	RoutedSubnets []string `json:"routedSubnets,omitempty"`
	// PodSubnet is the cluster's pod network; each node's pods get a /24.
	// A dual-stack lab lists an IPv6 network of /48 to /63 after it, of
	// which each node's pods get a /64.
	PodSubnet string `json:"podSubnet"`
	// ServiceSubnet is the cluster's Service range (default: kubeboot's,
	// 10.96.0.0/12). A dual-stack lab lists an IPv4 and an IPv6 range,
	// like 10.96.0.0/12,fd10:96::/112, and its Services may have both.
	ServiceSubnet string `json:"serviceSubnet,omitempty"`
	// Nodes are the cluster's nodes; the first is a control-plane node.
	Nodes []ClusterNode `json:"nodes"`
	// KubernetesVersion is the control plane's release (default: kubeboot's
	// default); the bin dir must hold its binaries, as v<major>.<minor>/
	// for another release than its own (build.sh --with-v1.35). The
	// kubelets are the bin dir's own.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// FeatureGates turn Kubernetes feature gates on or off in every
	// component of the cluster, as kind's featureGates do: the API
	// server's, controller-manager's and scheduler's --feature-gates, and
	// every kubelet's and kube-proxy's featureGates. Example:
	// {InPlacePodVerticalScaling: true}.
	FeatureGates map[string]bool `json:"featureGates,omitempty"`
	// RuntimeConfig turns API groups and versions on or off in the API
	// server (--runtime-config), as kind's runtimeConfig does. Example:
	// {"api/alpha": "true"}.
	RuntimeConfig map[string]string `json:"runtimeConfig,omitempty"`
	// ClusterConfigurationPatch is a JSON merge patch (RFC 7386), written
	// as YAML, of every control-plane node's kubeboot configuration
	// (the first node's ClusterConfiguration, the others'
	// JoinConfiguration), applied over what the lab writes: a field set
	// replaces the lab's (a list whole), a null removes it. Example:
	// {apiServer: {certSANs: [lab.example]}}.
	ClusterConfigurationPatch map[string]any `json:"clusterConfigurationPatch,omitempty"`
	// Images are images every node holds from its first boot besides the
	// lab's own, each built from the bin dir as those are (ResolveImage):
	// the images of objects in addons.manifests, such as a pod network of
	// your own beside addons.cni.provider none in the
	// clusterConfigurationPatch. Example:
	// [docker.io/cloudnativelabs/kube-router:v2.1.0] (build.sh --bench).
	Images []string `json:"images,omitempty"`
	// PortMappings forward ports of this host's loopback to a NodePort of
	// the cluster: a connection to 127.0.0.1:hostPort goes to nodePort
	// of one of the nodes, round-robin, through the lab's load balancer.
	PortMappings []PortMapping `json:"portMappings,omitempty"`
	// source is the file the description was read from, for errors.
	source string
}

// How a lab worker joins its cluster, and how its first node inits it.
const (
	// JoinKubeboot runs `kubeboot join` with a bootstrap token and the CA's
	// hash, the default.
	JoinKubeboot = "kubeboot"
	// JoinKubeadm runs the real `kubeadm join` with the discovery file of
	// `kubeboot token create` (or the real `kubeadm init`), in a mount
	// namespace of the node's own, so that kubeadm's fixed /etc/kubernetes
	// and /var/lib/kubelet are the node's directories.
	JoinKubeadm = "kubeadm"
)

// ClusterNode is one node of a lab cluster.
type ClusterNode struct {
	// Name is the node's name (and its Node object's).
	Name string `json:"name"`
	// Role is control-plane or worker.
	Role string `json:"role"`
	// Join is how a worker joins: kubeboot (the default) or kubeadm.
	Join string `json:"join,omitempty"`
	// Subnet is the node's network: the cluster's subnet (the default)
	// or one of its routedSubnets.
	Subnet string `json:"subnet,omitempty"`
	// Init is how the first node bootstraps the cluster: kubeboot (the
	// default) or kubeadm, the real `kubeadm init`, which makes a lab of
	// that one node, side by side with kubeboot's (make bench).
	Init string `json:"init,omitempty"`
	// ExtraMounts bind host paths into the node's machine, as kind's
	// extraMounts do.
	ExtraMounts []Mount `json:"extraMounts,omitempty"`
}

// Mount is a host path bound into a node.
type Mount struct {
	// HostPath is the host's file or directory, which must exist.
	HostPath string `json:"hostPath"`
	// ContainerPath is where the node sees it.
	ContainerPath string `json:"containerPath"`
	// ReadOnly binds it read-only; otherwise what the node writes there
	// the host sees at once.
	ReadOnly bool `json:"readOnly,omitempty"`
}

// PortMapping forwards a TCP port of this host's loopback to a NodePort.
type PortMapping struct {
	// HostPort is the port on 127.0.0.1, which must be free.
	HostPort int `json:"hostPort"`
	// NodePort is a Service's NodePort, in 30000-32767.
	NodePort int `json:"nodePort"`
}

// LoadCluster reads and checks a lab description.
func LoadCluster(path string) (*Cluster, error) {
	data, err := inputfile.ReadYAML(path, inputfile.ConfigLimit, inputfile.ConfigNodes)
	if err != nil {
		return nil, err
	}
	c := &Cluster{source: path}
	if err := yaml.UnmarshalStrict(data, c); err != nil {
		return nil, fmt.Errorf("%s: %w (see examples/cluster.yaml)", path, err)
	}
	if c.Subnet == "" {
		c.Subnet = "10.89.0.0/24"
	}
	if c.PodSubnet == "" {
		c.PodSubnet = "10.244.0.0/16"
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// validate names the field and the fix of every problem.
func (c *Cluster) validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s: %s", c.source, field, fmt.Sprintf(format, args...)))
	}
	if c.APIVersion != "kubeboot.io/v1alpha1" || c.Kind != ClusterKind {
		bad("apiVersion/kind", "got %q/%q, want kubeboot.io/v1alpha1/%s", c.APIVersion, c.Kind, ClusterKind)
	}
	if msgs := validation.IsDNS1123Label(c.Name); len(msgs) > 0 || len(c.Name) > 12 {
		bad("name", "%q: want a lower-case DNS label of at most 12 characters, like lab", c.Name)
	}
	if !filepath.IsAbs(c.Dir) || filepath.Clean(c.Dir) == "/" {
		bad("dir", "%q: want an absolute directory of the lab's own, like /tmp/kubeboot-cluster", c.Dir)
	}
	subnets, ok := families(c.Subnet)
	if !ok || !sized(subnets[0], 24, 24) || len(subnets) == 2 && !sized(subnets[1], 64, 64) {
		bad("subnet", "%q: want an IPv4 /24 network address, like 10.89.0.0/24, and for a dual-stack lab an IPv6 /64 after it, like 10.89.0.0/24,fd89::/64", c.Subnet)
	}
	dual := ok && len(subnets) == 2
	pods, ok := families(c.PodSubnet)
	if !ok || !sized(pods[0], 1, 16) || len(pods) == 2 && !sized(pods[1], 48, 63) || (len(pods) == 2) != dual {
		want := "an IPv4 network of /16 or larger, like 10.244.0.0/16"
		if dual {
			want += ", and after it an IPv6 network of /48 to /63 (each node's pods get a /64), like 10.244.0.0/16,fd10:244::/56: the subnet is dual-stack"
		}
		bad("podSubnet", "%q: want %s", c.PodSubnet, want)
	}
	if services, ok := families(c.ServiceSubnet); c.ServiceSubnet != "" && !ok || dual && len(services) != 2 || !dual && len(services) == 2 {
		want := "an IPv4 range, like 10.96.0.0/12, or leave it out for that one"
		if dual {
			want = "an IPv4 and an IPv6 range, like 10.96.0.0/12,fd10:96::/112: the subnet is dual-stack"
		}
		bad("serviceSubnet", "%q: want %s", c.ServiceSubnet, want)
	}
	if dual && len(c.RoutedSubnets) > 0 {
		bad("routedSubnets", "a dual-stack lab has one subnet: remove routedSubnets, or the subnet's IPv6 network")
	}
	for i, r := range c.RoutedSubnets {
		field := fmt.Sprintf("routedSubnets[%d]", i)
		p, err := netip.ParsePrefix(r)
		if err != nil || !p.Addr().Is4() || p.Bits() != 24 || p.Masked() != p {
			bad(field, "%q: want an IPv4 /24 network address, like 10.89.3.0/24", r)
			continue
		}
		for j, other := range append([]string{c.Subnet, c.PodSubnet}, c.RoutedSubnets[:i]...) {
			if overlap(other, r) {
				name := [...]string{"subnet", "podSubnet"}[min(j, 1)]
				if j >= 2 {
					name = fmt.Sprintf("routedSubnets[%d]", j-2)
				}
				bad(field, "%q overlaps %s %s: give each network addresses of its own", r, name, other)
			}
		}
	}
	var names []string
	controlPlanes := 0
	for i := range c.Nodes {
		n := &c.Nodes[i]
		field := fmt.Sprintf("nodes[%d]", i)
		if n.Role == RoleWorker && n.Join == "" {
			n.Join = JoinKubeboot
		}
		switch {
		case n.Init != "" && i > 0:
			bad(field+".init", "only the first node inits the cluster: remove init")
		case n.Init != "" && n.Init != JoinKubeboot && n.Init != JoinKubeadm:
			bad(field+".init", "%q: want %s or %s", n.Init, JoinKubeboot, JoinKubeadm)
		case n.Init == JoinKubeadm && len(c.Nodes) > 1:
			bad(field+".init", "a cluster that kubeadm inits is that one node (kubeboot's token and bundle do not join it): remove the other nodes, or init with kubeboot")
		case n.Role == RoleControlPlane && n.Join != "":
			bad(field+".join", "a control-plane node joins with kubeboot's certificate bundle: remove join, or make the node a worker")
		case n.Role == RoleWorker && n.Join != JoinKubeboot && n.Join != JoinKubeadm:
			bad(field+".join", "%q: want %s or %s", n.Join, JoinKubeboot, JoinKubeadm)
		}
		if msgs := validation.IsDNS1123Label(n.Name); len(msgs) > 0 {
			bad(field+".name", "%q: want a lower-case DNS label, like cp1", n.Name)
		}
		if n.Subnet != "" && n.Subnet != c.mainSubnet() && !slices.Contains(c.RoutedSubnets, n.Subnet) {
			bad(field+".subnet", "%q is neither the lab's subnet nor one of its routedSubnets: add it to routedSubnets, or leave subnet out for %s", n.Subnet, c.mainSubnet())
		}
		if slices.Contains(names, n.Name) {
			bad(field+".name", "%q is listed twice: give each node its own name", n.Name)
		}
		names = append(names, n.Name)
		switch n.Role {
		case RoleControlPlane:
			controlPlanes++
		case RoleWorker:
			if i == 0 {
				bad(field+".role", "the first node must be a control-plane node: list a control-plane node first")
			}
		default:
			bad(field+".role", "%q: want %s or %s", n.Role, RoleControlPlane, RoleWorker)
		}
	}
	if controlPlanes < 1 || controlPlanes > 3 {
		bad("nodes", "%d control-plane nodes: want 1 to 3 (more than one are behind the lab's load balancer)", controlPlanes)
	}
	if v := c.KubernetesVersion; v != "" {
		if _, err := version.ParseSemantic(strings.TrimPrefix(v, "v")); err != nil || !strings.HasPrefix(v, "v") {
			bad("kubernetesVersion", "%q: want a release like v1.35.4, or leave it out for kubeboot's default", v)
		}
	}
	errs = append(errs, c.validateKnobs()...)
	if len(c.Nodes) > 200 {
		bad("nodes", "%d nodes do not fit the subnet's addresses .10 to .209", len(c.Nodes))
	}
	return errors.Join(errs...)
}

// Hub is the network namespace of the lab's bridge and load balancer.
func (c *Cluster) Hub() string { return "kb-" + c.Name }

// Netns is a node's network namespace (a file in /run/netns).
func (c *Cluster) Netns(node string) string { return "kb-" + c.Name + "-" + node }

// families parses a list of one CIDR, or two of different families
// (IPv4 first), comma-separated; ok is false for anything else.
func families(list string) (prefixes []netip.Prefix, ok bool) {
	for s := range strings.SplitSeq(list, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil || p.Masked() != p {
			return nil, false
		}
		prefixes = append(prefixes, p)
	}
	ok = len(prefixes) == 1 && prefixes[0].Addr().Is4() ||
		len(prefixes) == 2 && prefixes[0].Addr().Is4() && prefixes[1].Addr().Is6() && !prefixes[1].Addr().Is4In6()
	return prefixes, ok
}

// sized says whether p's prefix is between shortest and longest bits.
func sized(p netip.Prefix, shortest, longest int) bool {
	return p.Bits() >= shortest && p.Bits() <= longest
}

// mainSubnet is the subnet's IPv4 network, the nodes' network in the
// hub's br0 (a dual-stack lab's IPv6 network is on it too).
func (c *Cluster) mainSubnet() string {
	v4, _, _ := strings.Cut(c.Subnet, ",")
	return strings.TrimSpace(v4)
}

// subnet6 is a dual-stack lab's IPv6 network of nodes; ok is false in an
// IPv4 lab.
func (c *Cluster) subnet6() (p netip.Prefix, ok bool) {
	_, v6, ok := strings.Cut(c.Subnet, ",")
	if !ok {
		return netip.Prefix{}, false
	}
	return netip.MustParsePrefix(strings.TrimSpace(v6)), true
}

// HubAddress is the hub's address on the bridge, the subnet's first: the
// nodes' gateway and the load balancer's address.
func (c *Cluster) HubAddress() netip.Addr {
	return netip.MustParsePrefix(c.mainSubnet()).Addr().Next()
}

// subnets are the lab's networks of nodes: its subnet, then its routed
// subnets, each on the hub's bridge of the same index (br0, br1, ...).
func (c *Cluster) subnets() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range append([]string{c.mainSubnet()}, c.RoutedSubnets...) {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// subnetIndex is the index in subnets of the i-th node's network.
func (c *Cluster) subnetIndex(i int) int {
	if s := c.Nodes[i].Subnet; s != "" && s != c.mainSubnet() {
		return 1 + slices.Index(c.RoutedSubnets, s)
	}
	return 0
}

// Gateway is the i-th node's gateway: the hub's address on its network.
func (c *Cluster) Gateway(i int) netip.Addr {
	return c.subnets()[c.subnetIndex(i)].Addr().Next()
}

// Address is the i-th node's address: .10+i of its network, so that no
// two nodes share the last byte, whatever network each is on.
func (c *Cluster) Address(i int) netip.Addr {
	a := c.subnets()[c.subnetIndex(i)].Addr().As4()
	a[3] = byte(10 + i)
	return netip.AddrFrom4(a)
}

// Address6 is a dual-stack lab's IPv6 address of the i-th node: ::a+i of
// the subnet's IPv6 network, the same host part as its IPv4 address; ok
// is false in an IPv4 lab.
func (c *Cluster) Address6(i int) (a netip.Addr, ok bool) {
	p, ok := c.subnet6()
	if !ok {
		return netip.Addr{}, false
	}
	b := p.Addr().As16()
	b[15] = byte(10 + i)
	return netip.AddrFrom16(b), true
}

// NodeDir is where a node's files live.
func (c *Cluster) NodeDir(node string) string { return filepath.Join(c.Dir, node) }

// ControlPlanes are the control-plane nodes' indexes, in order.
func (c *Cluster) ControlPlanes() []int {
	var cps []int
	for i, n := range c.Nodes {
		if n.Role == RoleControlPlane {
			cps = append(cps, i)
		}
	}
	return cps
}
