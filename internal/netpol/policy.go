// Package netpol enforces Kubernetes NetworkPolicy on one node: it turns
// the cluster's policies, pods and namespaces into the verdicts for the
// node's own pods (Compute), and those into one nftables table of the
// node's, replaced whole and at once (Apply). The controller (Run) watches
// the cluster and applies again after every change. Each pod's ingress is
// enforced on its node, and its egress on its node, as the NetworkPolicy
// API defines them: a pod selected by a policy of a direction accepts, in
// that direction, only new connections some such policy allows; replies
// and connections already open pass.
package netpol

import (
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Pod is what the enforcer needs of a pod: where it is, its labels, its
// addresses and its containers' named ports.
type Pod struct {
	Namespace, Name string
	Node            string
	Labels          map[string]string
	IPs             []netip.Addr
	Ports           []corev1.ContainerPort
}

// PodOf is the enforcer's view of a pod, and whether it takes part in
// NetworkPolicy at all: a pod on the host's network (its address is its
// node's), or one without an address or done, does not.
func PodOf(p *corev1.Pod) (Pod, bool) {
	if p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.DeletionTimestamp != nil {
		return Pod{}, false
	}
	out := Pod{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, Labels: p.Labels}
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out.IPs = append(out.IPs, a.Unmap())
		}
	}
	if len(out.IPs) == 0 {
		return Pod{}, false
	}
	for _, c := range p.Spec.Containers {
		out.Ports = append(out.Ports, c.Ports...)
	}
	return out, true
}

// PortRange is a range of one protocol's ports, both ends included; a
// zero From means every port of the protocol.
type PortRange struct {
	Protocol corev1.Protocol
	From, To uint16
}

// Rule allows connections from (ingress) or to (egress) Peers, except
// those in Except, on Ports. No Peers means any address; no Ports, any
// protocol and port.
type Rule struct {
	Peers  []netip.Prefix
	Except []netip.Prefix
	Ports  []PortRange
}

// Verdicts are what one pod of the node accepts: nil Ingress (Egress)
// means the pod is not isolated in that direction and accepts all.
type Verdicts struct {
	Pod     Pod
	Ingress *[]Rule
	Egress  *[]Rule
}

// Cluster is what Compute reads: every pod and namespace of the cluster,
// and every NetworkPolicy.
type Cluster struct {
	Pods       []Pod
	Namespaces []corev1.Namespace
	Policies   []networkingv1.NetworkPolicy
}

// Compute is the verdicts of node's pods that some policy selects, in the
// order of c.Pods; a pod no policy selects accepts all and is left out.
func Compute(c Cluster, node string) []Verdicts {
	var out []Verdicts
	for _, pod := range c.Pods {
		if pod.Node != node {
			continue
		}
		v := Verdicts{Pod: pod}
		for i := range c.Policies {
			p := &c.Policies[i]
			if p.Namespace != pod.Namespace || !matches(&p.Spec.PodSelector, pod.Labels) {
				continue
			}
			for _, t := range policyTypes(p) {
				switch t {
				case networkingv1.PolicyTypeIngress:
					v.Ingress = appendRules(v.Ingress, ingressRules(c, p, pod))
				case networkingv1.PolicyTypeEgress:
					v.Egress = appendRules(v.Egress, egressRules(c, p))
				}
			}
		}
		if v.Ingress != nil || v.Egress != nil {
			out = append(out, v)
		}
	}
	return out
}

// policyTypes are the directions a policy isolates its pods in: as the
// API server defaults them, Ingress always and Egress when it has egress
// rules, unless the policy names them.
func policyTypes(p *networkingv1.NetworkPolicy) []networkingv1.PolicyType {
	if len(p.Spec.PolicyTypes) > 0 {
		return p.Spec.PolicyTypes
	}
	types := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	if len(p.Spec.Egress) > 0 {
		types = append(types, networkingv1.PolicyTypeEgress)
	}
	return types
}

// appendRules adds rules to a direction's list, which exists from then
// on, empty or not: the pod is isolated in that direction.
func appendRules(list *[]Rule, rules []Rule) *[]Rule {
	if list == nil {
		list = &[]Rule{}
	}
	*list = append(*list, rules...)
	return list
}

// portsOf gives the ports a rule allows to or from a peer pod (a zero
// Pod for an address outside the cluster): an empty list for every port,
// false for none.
type portsOf func(peer Pod) ([]PortRange, bool)

// ingressRules are a policy's ingress rules for its selected pod target:
// named ports are the target's own.
func ingressRules(c Cluster, p *networkingv1.NetworkPolicy, target Pod) []Rule {
	var out []Rule
	for _, r := range p.Spec.Ingress {
		ports, ok := resolvePorts(r.Ports, target.Ports)
		if !ok {
			continue // only named ports, none of which the pod has
		}
		out = append(out, peerRules(c, p.Namespace, r.From, func(Pod) ([]PortRange, bool) { return ports, true }, false)...)
	}
	return out
}

// egressRules are a policy's egress rules: a named port is each
// destination pod's own, so it allows a pod peer on the port its
// containers give that name, and an address outside the cluster on none.
func egressRules(c Cluster, p *networkingv1.NetworkPolicy) []Rule {
	var out []Rule
	for _, r := range p.Spec.Egress {
		named := hasNamedPort(r.Ports)
		ports := func(peer Pod) ([]PortRange, bool) { return resolvePorts(r.Ports, peer.Ports) }
		out = append(out, peerRules(c, p.Namespace, r.To, ports, named)...)
	}
	return out
}

// peerRules are the rules of one policy rule's peers, in namespace ns.
// No peer means any address; with named ports, also every pod on the
// ports its containers name so. A pod peer is each selected pod's
// addresses, pods with the same ports sharing a rule; an ipBlock is its
// CIDR and exceptions.
func peerRules(c Cluster, ns string, peers []networkingv1.NetworkPolicyPeer, ports portsOf, named bool) []Rule {
	var out []Rule
	if len(peers) == 0 {
		if p, ok := ports(Pod{}); ok {
			out = append(out, Rule{Ports: p})
		}
		if named {
			out = append(out, podRules(c.Pods, ports)...)
		}
		return out
	}
	for _, peer := range peers {
		if b := peer.IPBlock; b != nil {
			if p, ok := ports(Pod{}); ok {
				if r, ok := ipBlockRule(b, p); ok {
					out = append(out, r)
				}
			}
			continue
		}
		out = append(out, podRules(selectPods(c, ns, peer), ports)...)
	}
	return out
}

// podRules groups pods by their ports: one rule per list of ports, with
// every address of the pods that have it. A pod allowed no port is left
// out, and so is a rule without a pod: no peer would read as any address.
func podRules(pods []Pod, ports portsOf) []Rule {
	var out []Rule
	byPorts := map[string]int{}
	for _, pod := range pods {
		p, ok := ports(pod)
		if !ok {
			continue
		}
		key := fmt.Sprint(p)
		i, seen := byPorts[key]
		if !seen {
			i = len(out)
			byPorts[key] = i
			out = append(out, Rule{Ports: p})
		}
		for _, ip := range pod.IPs {
			out[i].Peers = append(out[i].Peers, netip.PrefixFrom(ip, ip.BitLen()))
		}
	}
	return out
}

// ipBlockRule is an ipBlock peer's rule; a malformed CIDR (which the API
// server refuses) allows nothing.
func ipBlockRule(b *networkingv1.IPBlock, ports []PortRange) (Rule, bool) {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return Rule{}, false
	}
	r := Rule{Peers: []netip.Prefix{cidr.Masked()}, Ports: ports}
	for _, e := range b.Except {
		if p, err := netip.ParsePrefix(e); err == nil {
			r.Except = append(r.Except, p.Masked())
		}
	}
	return r, true
}

// selectPods are the pods a pod or namespace selector peer selects: pods
// of ns matching its pod selector, or of the namespaces matching its
// namespace selector (every pod of them without a pod selector).
func selectPods(c Cluster, ns string, peer networkingv1.NetworkPolicyPeer) []Pod {
	namespaces := map[string]bool{ns: true}
	if peer.NamespaceSelector != nil {
		namespaces = map[string]bool{}
		for _, n := range c.Namespaces {
			if matches(peer.NamespaceSelector, n.Labels) {
				namespaces[n.Name] = true
			}
		}
	}
	var out []Pod
	for _, pod := range c.Pods {
		if namespaces[pod.Namespace] && (peer.PodSelector == nil || matches(peer.PodSelector, pod.Labels)) {
			out = append(out, pod)
		}
	}
	return out
}

// matches says whether a label selector selects labels; an invalid one
// (which the API server refuses) selects nothing.
func matches(s *metav1.LabelSelector, l map[string]string) bool {
	sel, err := metav1.LabelSelectorAsSelector(s)
	return err == nil && sel.Matches(labels.Set(l))
}

// hasNamedPort says whether any of a rule's ports is named.
func hasNamedPort(ports []networkingv1.NetworkPolicyPort) bool {
	return slices.ContainsFunc(ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port != nil && p.Port.StrVal != "" })
}

// resolvePorts turns a rule's ports into ranges, named ones through
// named (a pod's container ports): an empty list for a rule of no ports
// (every port); false when the rule has ports and none resolves.
func resolvePorts(ports []networkingv1.NetworkPolicyPort, named []corev1.ContainerPort) ([]PortRange, bool) {
	out := []PortRange{}
	if len(ports) == 0 {
		return out, true
	}
	for _, p := range ports {
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		switch {
		case p.Port == nil:
			out = append(out, PortRange{Protocol: proto})
		case p.Port.StrVal != "":
			for _, c := range named {
				cp := c.Protocol
				if cp == "" {
					cp = corev1.ProtocolTCP
				}
				if c.Name == p.Port.StrVal && cp == proto {
					out = append(out, PortRange{Protocol: proto, From: uint16(c.ContainerPort), To: uint16(c.ContainerPort)})
				}
			}
		default:
			to := p.Port.IntVal
			if p.EndPort != nil {
				to = *p.EndPort
			}
			out = append(out, PortRange{Protocol: proto, From: uint16(p.Port.IntVal), To: uint16(to)})
		}
	}
	return out, len(out) > 0
}
