// Package fleet turns one description of a cluster's nodes (a Fleet) into
// every node's kubeboot file, with the secrets they share made once: the
// bootstrap token, the certificate key and the cluster CA, whose hash the
// joining nodes pin. It is `kubeboot config fleet`, and what the lab's
// machines get their files from.
//
// A Plan keeps the secrets in the output directory and reuses them, so a
// second run changes no byte and a node added to the description gets
// only its own file: the first control-plane node's file, with which that
// node has run init, keeps listing the workers' tokens it listed, and a
// worker added later is one to admit, its token made in the running
// cluster (package tokens). A plan writes through atomicfile, so a crash
// leaves every file whole, old or new.
package fleet

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/inputfile"
)

// Kind is the kind of a fleet description.
const Kind = "Fleet"

// APIVersion is the apiVersion of a fleet description, as the
// configuration's.
const APIVersion = "kubeboot.io/v1alpha1"

// The roles of a fleet's nodes.
const (
	RoleControlPlane = "control-plane"
	RoleWorker       = "worker"
)

// Description is a fleet: the cluster's settings and its nodes.
type Description struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Cluster is what every control-plane node's file says of the cluster:
	// a ClusterConfiguration's fields (clusterName, kubernetesVersion,
	// controlPlaneEndpoint, networking, addons...), without node,
	// bootstrapTokens, certificateKey and certificates.ca, which the fleet
	// sets. controlPlaneEndpoint defaults to the first control-plane
	// node's address, port 6443; a fleet of more than one control-plane
	// node must name its load balancer.
	Cluster map[string]any `json:"cluster,omitempty"`
	// Worker is what every worker's file says besides its node and the
	// discovery: a WorkerConfiguration's fields (kubelet, paths,
	// timeouts...).
	Worker map[string]any `json:"worker,omitempty"`
	// Nodes are the fleet's nodes; the first control-plane node among
	// them inits the cluster, the others join it.
	Nodes []Node `json:"nodes"`
	// source is the file the description was read from, for errors.
	source string
}

// Node is one machine of the fleet.
type Node struct {
	// Name is the node's name, a lower-case DNS subdomain.
	Name string `json:"name"`
	// Role is control-plane or worker.
	Role string `json:"role"`
	// Address is the node's IP address: a control-plane node's advertise
	// address, a worker's node address.
	Address string `json:"address"`
	// SecondaryAddress is the node's IP address of the other family, on
	// a dual-stack cluster: its file's node.secondaryAddress, the
	// kubelet's second node IP. Optional.
	SecondaryAddress string `json:"secondaryAddress,omitempty"`
	// MAC is the hardware address by which `kubeboot config serve` knows
	// the machine, when it asks for its file by MAC address rather than
	// by host name. Optional.
	MAC string `json:"mac,omitempty"`
	// Patch is a JSON merge patch (RFC 7386), written as YAML, of this
	// node's file, applied over what the fleet writes: a field set
	// replaces the fleet's (a list whole), a null removes it.
	Patch map[string]any `json:"patch,omitempty"`
}

// owned are the fields of cluster that the fleet sets itself.
var owned = []string{"apiVersion", "kind", "node", "bootstrapTokens", "certificateKey", "join"}

// workerOwned are the fields of worker that the fleet sets itself.
var workerOwned = []string{"apiVersion", "kind", "node", "discovery"}

// Load reads a fleet description strictly, refusing every mistake with
// the file, the field and the fix.
func Load(path string) (*Description, error) {
	data, err := inputfile.ReadYAML(path, inputfile.ConfigLimit, inputfile.ConfigNodes)
	if err != nil {
		return nil, err
	}
	d := &Description{source: path}
	if err := yaml.UnmarshalStrict(data, d); err != nil {
		return nil, &exit.UsageError{Msg: fmt.Sprintf("%s: %v (see examples/fleet.yaml)", path, err)}
	}
	if err := d.validate(); err != nil {
		return nil, err
	}
	return d, nil
}

// Source is the file the description was read from.
func (d *Description) Source() string { return d.source }

// validate names the field and the fix of every problem.
func (d *Description) validate() error {
	var problems []string
	bad := func(field, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s: %s: %s", d.source, field, fmt.Sprintf(format, args...)))
	}
	if d.APIVersion != APIVersion || d.Kind != Kind {
		bad("apiVersion/kind", "got %q/%q, want %s/%s", d.APIVersion, d.Kind, APIVersion, Kind)
	}
	for _, f := range owned {
		if _, ok := d.Cluster[f]; ok {
			bad("cluster."+f, "the fleet sets it: remove it (a node's own settings go in its patch)")
		}
	}
	if certs, ok := d.Cluster["certificates"].(map[string]any); ok {
		if _, ok := certs["ca"]; ok {
			bad("cluster.certificates.ca", "the fleet makes the CA once and keeps it in its output directory: remove it")
		}
	}
	for _, f := range workerOwned {
		if _, ok := d.Worker[f]; ok {
			bad("worker."+f, "the fleet sets it: remove it (a node's own settings go in its patch)")
		}
	}
	names, macs := map[string]bool{}, map[string]bool{}
	controlPlanes := 0
	for i, n := range d.Nodes {
		field := fmt.Sprintf("nodes[%d]", i)
		if msgs := validation.IsDNS1123Subdomain(n.Name); len(msgs) > 0 {
			bad(field+".name", "%q: want a lower-case DNS name, like cp1", n.Name)
		} else if names[n.Name] {
			bad(field+".name", "%q: named twice: give each node a name of its own", n.Name)
		}
		names[n.Name] = true
		switch n.Role {
		case RoleControlPlane:
			controlPlanes++
		case RoleWorker:
		default:
			bad(field+".role", "%q: want %s or %s", n.Role, RoleControlPlane, RoleWorker)
		}
		a, err := netip.ParseAddr(n.Address)
		if err != nil || a.Zone() != "" {
			bad(field+".address", "%q: want the node's IP address, like 10.0.0.11", n.Address)
		}
		if n.SecondaryAddress != "" {
			if s, err := netip.ParseAddr(n.SecondaryAddress); err != nil || s.Zone() != "" || s.Is4() == a.Is4() {
				bad(field+".secondaryAddress", "%q: want the node's IP address of the other family than its address, like fd00:89::11, or leave it out", n.SecondaryAddress)
			}
		}
		if n.MAC != "" {
			if hw, err := net.ParseMAC(n.MAC); err != nil || len(hw) != 6 || hw.String() != n.MAC {
				bad(field+".mac", "%q: want a lower-case MAC address, like 52:54:00:12:34:56", n.MAC)
			} else if macs[n.MAC] {
				bad(field+".mac", "%q: given twice: each machine has its own", n.MAC)
			}
			macs[n.MAC] = true
		}
	}
	switch {
	case controlPlanes == 0:
		bad("nodes", "no node has role %s: the first one inits the cluster", RoleControlPlane)
	case controlPlanes > 1 && d.Cluster["controlPlaneEndpoint"] == nil:
		bad("cluster.controlPlaneEndpoint", "unset, with %d control-plane nodes: name the load balancer in front of them, like lb.example:6443", controlPlanes)
	}
	if len(problems) > 0 {
		return &exit.UsageError{Msg: strings.Join(problems, "\n")}
	}
	return nil
}

// first is the index of the node that inits the cluster.
func (d *Description) first() int {
	return slices.IndexFunc(d.Nodes, func(n Node) bool { return n.Role == RoleControlPlane })
}

// endpoint is where the nodes reach the cluster's API: the cluster's
// controlPlaneEndpoint, or the first control-plane node's address.
func (d *Description) endpoint() string {
	if e, ok := d.Cluster["controlPlaneEndpoint"].(string); ok && e != "" {
		return e
	}
	return netip.AddrPortFrom(netip.MustParseAddr(d.Nodes[d.first()].Address), 6443).String()
}
