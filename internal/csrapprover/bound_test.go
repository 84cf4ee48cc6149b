package csrapprover

import (
	"context"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// boundCSR is a kubelet's client CSR for cn, posted with the token bound
// to node (groups as the API server gives a bootstrap token's requester).
func boundCSR(t testing.TB, name, node, cn string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    request(t, subject{cn: cn, orgs: []string{NodesGroup}}),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
			Username:   "system:bootstrap:abcdef",
			Groups:     []string{"system:bootstrappers", BoundGroup, BoundNodeGroup(node), "system:authenticated"},
		},
	}
}

// TestDecideBoundClient: a node-bound token's client CSR is approved for
// its node alone, and once: another name, another subject or usage, a
// Node that exists already are denied; a cluster-wide token's CSR is the
// controller-manager's to approve.
func TestDecideBoundClient(t *testing.T) {
	tests := []struct {
		name   string
		csr    func() *certificatesv1.CertificateSigningRequest
		node   *corev1.Node
		want   Verdict
		reason string
	}{
		{"its own node", func() *certificatesv1.CertificateSigningRequest { return boundCSR(t, "c", "w1", "system:node:w1") }, nil, Approve, ReasonBoundApproved},
		{"a dotted name", func() *certificatesv1.CertificateSigningRequest {
			return boundCSR(t, "c", "w1.rack-a.example", "system:node:w1.rack-a.example")
		}, nil, Approve, ReasonBoundApproved},
		{"another node's name", func() *certificatesv1.CertificateSigningRequest { return boundCSR(t, "c", "w1", "system:node:w2") }, nil, Deny, ReasonBoundNodeMismatch},
		{"its node joined already", func() *certificatesv1.CertificateSigningRequest { return boundCSR(t, "c", "w1", "system:node:w1") }, w1(), Deny, ReasonBoundNodeExists},
		{"another node exists", func() *certificatesv1.CertificateSigningRequest { return boundCSR(t, "c", "w2", "system:node:w2") }, w1(), Approve, ReasonBoundApproved},
		{"server usage", func() *certificatesv1.CertificateSigningRequest {
			csr := boundCSR(t, "c", "w1", "system:node:w1")
			csr.Spec.Usages = append(csr.Spec.Usages, certificatesv1.UsageServerAuth)
			return csr
		}, nil, Deny, ReasonForbiddenUsage},
		{"another organization", func() *certificatesv1.CertificateSigningRequest {
			csr := boundCSR(t, "c", "w1", "system:node:w1")
			csr.Spec.Request = request(t, subject{cn: "system:node:w1", orgs: []string{"system:masters"}})
			return csr
		}, nil, Deny, ReasonSubjectMismatch},
		{"no node group", func() *certificatesv1.CertificateSigningRequest {
			csr := boundCSR(t, "c", "w1", "system:node:w1")
			csr.Spec.Groups = []string{"system:bootstrappers", BoundGroup}
			return csr
		}, nil, Deny, ReasonBoundNoNode},
		{"two node groups", func() *certificatesv1.CertificateSigningRequest {
			csr := boundCSR(t, "c", "w1", "system:node:w1")
			csr.Spec.Groups = append(csr.Spec.Groups, BoundNodeGroup("w2"))
			return csr
		}, nil, Deny, ReasonBoundNoNode},
		{"a cluster-wide token", func() *certificatesv1.CertificateSigningRequest {
			csr := boundCSR(t, "c", "w1", "system:node:w2")
			csr.Spec.Groups = []string{"system:bootstrappers", "system:bootstrappers:kubeadm:default-node-token"}
			return csr
		}, nil, Ignore, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			csr := tt.csr()
			got := Decide(csr, tt.node)
			if got.Verdict != tt.want || got.Reason != tt.reason {
				t.Errorf("got %s %s (%s), want %s %s", got.Verdict, got.Reason, got.Message, tt.want, tt.reason)
			}
			if node, _ := BoundNode(csr); got.Verdict == Approve && Node(csr) != node {
				t.Errorf("Node %q, bound %q", Node(csr), node)
			}
		})
	}
	if g := BoundNodeGroup("w1.rack-a.example"); g != "system:bootstrappers:kubeboot:node:w1:rack-a:example" {
		t.Errorf("BoundNodeGroup: %s", g)
	}
}

// TestControllerBoundJoin: the controller approves a bound token's CSR
// while its Node does not exist, reading the Node from the API server,
// and denies a second one once it does, logging the refusal.
func TestControllerBoundJoin(t *testing.T) {
	client := fake.NewClientset(boundCSR(t, "csr-first", "w1", "system:node:w1"), boundCSR(t, "csr-stolen", "w1", "system:node:w9"))
	log := &logLines{}
	startController(t, client, log)
	log.waitFor(t, "approved CSR csr-first requested by system:bootstrap:abcdef: "+ReasonBoundApproved)
	log.waitFor(t, "denied CSR csr-stolen requested by system:bootstrap:abcdef: "+ReasonBoundNodeMismatch+": requested by system:bootstrap:abcdef with the token bound to node w1, for \"system:node:w9\"")
	if _, err := client.CoreV1().Nodes().Create(context.Background(), w1(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CertificatesV1().CertificateSigningRequests().Create(context.Background(), boundCSR(t, "csr-again", "w1", "system:node:w1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	log.waitFor(t, "denied CSR csr-again requested by system:bootstrap:abcdef: "+ReasonBoundNodeExists)
	if c := conditionsOf(t, client, "csr-again", 1); c[0].Type != certificatesv1.CertificateDenied || !strings.Contains(c[0].Message, "delete the Node to join it again") {
		t.Errorf("csr-again's condition: %+v", c[0])
	}
}
