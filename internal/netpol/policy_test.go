package netpol

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func pod(ns, name, node, ip string, labels map[string]string, ports ...corev1.ContainerPort) Pod {
	return Pod{Namespace: ns, Name: name, Node: node, Labels: labels, IPs: []netip.Addr{netip.MustParseAddr(ip)}, Ports: ports}
}

func host(ip string) netip.Prefix {
	a := netip.MustParseAddr(ip)
	return netip.PrefixFrom(a, a.BitLen())
}

// policy is a policy of namespace x, where the test's targets are.
func policy(spec networkingv1.NetworkPolicySpec) networkingv1.NetworkPolicy {
	return networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "p"}, Spec: spec}
}

func selector(kv ...string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{MatchLabels: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

func port(p intstr.IntOrString, proto corev1.Protocol) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Port: &p, Protocol: &proto}
}

// TestCompute: the verdicts of the node's selected pods follow the
// NetworkPolicy API: isolation per direction, the union of the policies,
// pod and namespace selectors and both together, ipBlocks with
// exceptions, numbered, ranged and named ports (a target's own on
// ingress, each destination's on egress), and pods of other nodes as
// peers but not as targets.
func TestCompute(t *testing.T) {
	web := map[string]string{"app": "web"}
	httpPort := corev1.ContainerPort{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}
	cluster := Cluster{
		Pods: []Pod{
			pod("x", "web", "n1", "10.244.1.2", web, httpPort),
			pod("x", "client", "n1", "10.244.1.3", map[string]string{"app": "client"}),
			pod("y", "other", "n2", "10.244.2.2", map[string]string{"app": "client"}, corev1.ContainerPort{Name: "http", ContainerPort: 9090}),
			pod("x", "remote-web", "n2", "10.244.2.3", web, httpPort),
		},
		Namespaces: []corev1.Namespace{
			{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: map[string]string{"team": "a"}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "y", Labels: map[string]string{"team": "b"}}},
		},
	}
	rules := func(r ...Rule) *[]Rule { return &r }
	all := []PortRange{}
	http := []PortRange{{Protocol: corev1.ProtocolTCP, From: 8080, To: 8080}}
	webIngress := func(spec networkingv1.NetworkPolicySpec) networkingv1.NetworkPolicySpec {
		spec.PodSelector = *selector("app", "web")
		return spec
	}
	for _, tt := range []struct {
		name     string
		policies []networkingv1.NetworkPolicy
		want     []Verdicts
	}{
		{"no policy", nil, nil},
		{"deny all ingress in x", []networkingv1.NetworkPolicy{policy(networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}})},
			[]Verdicts{{Pod: cluster.Pods[0], Ingress: rules()}, {Pod: cluster.Pods[1], Ingress: rules()}}},
		{"pods of the namespace", []networkingv1.NetworkPolicy{policy(webIngress(networkingv1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: selector("app", "client")}}}}}))},
			[]Verdicts{{Pod: cluster.Pods[0], Ingress: rules(Rule{Peers: []netip.Prefix{host("10.244.1.3")}, Ports: all})}}},
		{"namespaces", []networkingv1.NetworkPolicy{policy(webIngress(networkingv1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: selector("team", "b")}}}}}))},
			[]Verdicts{{Pod: cluster.Pods[0], Ingress: rules(Rule{Peers: []netip.Prefix{host("10.244.2.2")}, Ports: all})}}},
		{"pods of namespaces", []networkingv1.NetworkPolicy{policy(webIngress(networkingv1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: selector(), PodSelector: selector("app", "client")}}}}}))},
			[]Verdicts{{Pod: cluster.Pods[0], Ingress: rules(Rule{Peers: []netip.Prefix{host("10.244.1.3"), host("10.244.2.2")}, Ports: all})}}},
		{"a selector of no pod allows nothing", []networkingv1.NetworkPolicy{policy(webIngress(networkingv1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: selector("app", "none")}}}}}))},
			[]Verdicts{{Pod: cluster.Pods[0], Ingress: rules()}}},
		{"ipBlock and a named port of the target", []networkingv1.NetworkPolicy{policy(webIngress(networkingv1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"10.244.1.0/24"}}}},
				Ports: []networkingv1.NetworkPolicyPort{port(intstr.FromString("http"), corev1.ProtocolTCP)},
			}}}))},
			[]Verdicts{{Pod: cluster.Pods[0], Ingress: rules(Rule{Peers: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Except: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}, Ports: http})}}},
		{"a named port the target lacks allows nothing", []networkingv1.NetworkPolicy{policy(webIngress(networkingv1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{port(intstr.FromString("metrics"), corev1.ProtocolTCP)}}}}))},
			[]Verdicts{{Pod: cluster.Pods[0], Ingress: rules()}}},
		{"a port range", []networkingv1.NetworkPolicy{policy(webIngress(networkingv1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: new(intstr.FromInt32(8000)), EndPort: new(int32(8100))}}}}}))},
			[]Verdicts{{Pod: cluster.Pods[0], Ingress: rules(Rule{Ports: []PortRange{{Protocol: corev1.ProtocolTCP, From: 8000, To: 8100}}})}}},
		{"two policies add up", []networkingv1.NetworkPolicy{
			policy(webIngress(networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: selector("app", "client")}}}}})),
			policy(webIngress(networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{port(intstr.FromInt32(53), corev1.ProtocolUDP)}}}})),
		}, []Verdicts{{Pod: cluster.Pods[0], Ingress: rules(
			Rule{Peers: []netip.Prefix{host("10.244.1.3")}, Ports: all},
			Rule{Ports: []PortRange{{Protocol: corev1.ProtocolUDP, From: 53, To: 53}}})}}},
		{"egress to named ports: each destination's own", []networkingv1.NetworkPolicy{policy(networkingv1.NetworkPolicySpec{
			PodSelector: *selector("app", "client"),
			Egress:      []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{port(intstr.FromString("http"), corev1.ProtocolTCP)}}},
		})}, []Verdicts{{Pod: cluster.Pods[1], Ingress: rules(), Egress: rules(
			Rule{Peers: []netip.Prefix{host("10.244.1.2"), host("10.244.2.3")}, Ports: http},
			Rule{Peers: []netip.Prefix{host("10.244.2.2")}, Ports: []PortRange{{Protocol: corev1.ProtocolTCP, From: 9090, To: 9090}}})}}},
		{"egress only", []networkingv1.NetworkPolicy{policy(networkingv1.NetworkPolicySpec{
			PodSelector: *selector("app", "client"), PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{PodSelector: selector("app", "web")}}}},
		})}, []Verdicts{{Pod: cluster.Pods[1], Egress: rules(Rule{Peers: []netip.Prefix{host("10.244.1.2"), host("10.244.2.3")}, Ports: all})}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := cluster
			c.Policies = tt.policies
			addrs := cmp.Options{cmp.Comparer(func(a, b netip.Addr) bool { return a == b }), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }), cmpopts.EquateEmpty()}
			if diff := cmp.Diff(tt.want, Compute(c, "n1"), addrs); diff != "" {
				t.Errorf("verdicts on n1 (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPodOf: pods on the host's network, without an address or done take
// no part; the others carry their addresses and named ports.
func TestPodOf(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "web"},
		Spec:   corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.244.1.2"}, {IP: "fd00::2"}}}}
	got, ok := PodOf(p)
	if !ok || len(got.IPs) != 2 || got.Ports[0].Name != "http" || got.Node != "n1" {
		t.Errorf("PodOf = %+v, %v", got, ok)
	}
	for name, edit := range map[string]func(*corev1.Pod){
		"host network": func(p *corev1.Pod) { p.Spec.HostNetwork = true },
		"no address":   func(p *corev1.Pod) { p.Status.PodIPs = nil },
		"succeeded":    func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded },
	} {
		q := p.DeepCopy()
		edit(q)
		if _, ok := PodOf(q); ok {
			t.Errorf("%s: the pod takes part", name)
		}
	}
}
