package csrapprover

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"net"
	"net/url"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// subject is what a test CSR's request asks for.
type subject struct {
	cn     string
	orgs   []string
	extra  []pkix.AttributeTypeAndValue
	dns    []string
	ips    []string
	emails []string
	uris   []string
}

// honestSubject is what the kubelet of node w1 asks for.
func honestSubject() subject {
	return subject{cn: "system:node:w1", orgs: []string{"system:nodes"}, dns: []string{"w1"}, ips: []string{"10.0.0.11"}}
}

// request returns a PEM certificate request for s, signed with a new key.
func request(t testing.TB, s subject) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{
		Subject:        pkix.Name{CommonName: s.cn, Organization: s.orgs, ExtraNames: s.extra},
		DNSNames:       s.dns,
		EmailAddresses: s.emails,
	}
	for _, ip := range s.ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	for _, u := range s.uris {
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, parsed)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// servingCSR is the CSR the kubelet of w1 posts with serverTLSBootstrap.
func servingCSR(t testing.TB, name string, s subject) *certificatesv1.CertificateSigningRequest {
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    request(t, s),
			SignerName: certificatesv1.KubeletServingSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
			Username:   "system:node:w1",
			Groups:     []string{"system:nodes", "system:authenticated"},
		},
	}
}

// testNode is a registered Node with the addresses the kubelet reports.
func testNode(name string, addresses ...corev1.NodeAddress) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: addresses}}
}

func w1() *corev1.Node {
	return testNode("w1",
		corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.11"},
		corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.11"},
		corev1.NodeAddress{Type: corev1.NodeHostName, Address: "w1"},
		corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: "w1.internal.example.com"})
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name        string
		edit        func(t *testing.T, csr *certificatesv1.CertificateSigningRequest)
		node        *corev1.Node
		want        Verdict
		wantReason  string
		wantMessage string
	}{
		{name: "honest", node: w1(), want: Approve, wantReason: ReasonApproved},
		{name: "honest with an RSA key's usages", node: w1(), want: Approve, wantReason: ReasonApproved,
			edit: func(_ *testing.T, csr *certificatesv1.CertificateSigningRequest) {
				csr.Spec.Usages = []certificatesv1.KeyUsage{"digital signature", "key encipherment", "server auth"}
			}},
		{name: "a subset of the addresses, any of the five types, DNS in another case", node: w1(), want: Approve, wantReason: ReasonApproved,
			edit: func(t *testing.T, csr *certificatesv1.CertificateSigningRequest) {
				s := honestSubject()
				s.dns, s.ips = []string{"W1.internal.example.com"}, []string{"203.0.113.11"}
				csr.Spec.Request = request(t, s)
			}},
		{name: "SAN IP not the node's", node: w1(), want: Deny, wantReason: ReasonSANNotNodeAddress,
			wantMessage: "SAN 10.0.0.99 is not an address of Node w1",
			edit: func(t *testing.T, csr *certificatesv1.CertificateSigningRequest) {
				s := honestSubject()
				s.ips = append(s.ips, "10.0.0.99")
				csr.Spec.Request = request(t, s)
			}},
		{name: "SAN DNS name not the node's", node: w1(), want: Deny, wantReason: ReasonSANNotNodeAddress,
			wantMessage: "SAN kubernetes.default.svc is not an address of Node w1",
			edit: func(t *testing.T, csr *certificatesv1.CertificateSigningRequest) {
				s := honestSubject()
				s.dns = append(s.dns, "kubernetes.default.svc")
				csr.Spec.Request = request(t, s)
			}},
		{name: "CN of another node", node: w1(), want: Deny, wantReason: ReasonRequesterMismatch,
			wantMessage: "requested by system:node:w1, not by node w2",
			edit: func(t *testing.T, csr *certificatesv1.CertificateSigningRequest) {
				s := honestSubject()
				s.cn = "system:node:w2"
				csr.Spec.Request = request(t, s)
			}},
		{name: "requested by another node", node: testNode("w2", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.11"}),
			want: Deny, wantReason: ReasonRequesterMismatch, wantMessage: "requested by system:node:w2, not by node w1",
			edit: func(_ *testing.T, csr *certificatesv1.CertificateSigningRequest) {
				csr.Spec.Username = "system:node:w2"
			}},
		{name: "extra usage client auth", node: w1(), want: Deny, wantReason: ReasonForbiddenUsage,
			wantMessage: `usage "client auth" is not one of a kubelet serving certificate`,
			edit: func(_ *testing.T, csr *certificatesv1.CertificateSigningRequest) {
				csr.Spec.Usages = append(csr.Spec.Usages, certificatesv1.UsageClientAuth)
			}},
		{name: "no server auth", node: w1(), want: Deny, wantReason: ReasonForbiddenUsage, wantMessage: `lack "server auth"`,
			edit: func(_ *testing.T, csr *certificatesv1.CertificateSigningRequest) {
				csr.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature}
			}},
		{name: "requested by an admin, not a node", node: w1(), want: Deny, wantReason: ReasonNotANode,
			wantMessage: "requested by kubernetes-admin, not by a node",
			edit: func(_ *testing.T, csr *certificatesv1.CertificateSigningRequest) {
				csr.Spec.Username, csr.Spec.Groups = "kubernetes-admin", []string{"kubeadm:cluster-admins", "system:authenticated"}
			}},
		{name: "node user outside system:nodes", node: w1(), want: Deny, wantReason: ReasonNotANode,
			wantMessage: "requested by system:node:w1 outside group system:nodes",
			edit: func(_ *testing.T, csr *certificatesv1.CertificateSigningRequest) {
				csr.Spec.Groups = []string{"system:authenticated"}
			}},
		{name: "Node missing", node: nil, want: Deny, wantReason: ReasonNodeNotFound, wantMessage: "Node w1 not found"},
		{name: "another Node given", node: testNode("w3"), want: Deny, wantReason: ReasonNodeNotFound, wantMessage: "Node w1 not found"},
		{name: "organization system:masters", node: w1(), want: Deny, wantReason: ReasonSubjectMismatch, wantMessage: "subject O",
			edit: func(t *testing.T, csr *certificatesv1.CertificateSigningRequest) {
				s := honestSubject()
				s.orgs = []string{"system:nodes", "system:masters"}
				csr.Spec.Request = request(t, s)
			}},
		{name: "CN not a node's", node: w1(), want: Deny, wantReason: ReasonSubjectMismatch, wantMessage: `subject CN "kube-apiserver"`,
			edit: func(t *testing.T, csr *certificatesv1.CertificateSigningRequest) {
				s := honestSubject()
				s.cn = "kube-apiserver"
				csr.Spec.Request = request(t, s)
			}},
		{name: "extra subject attribute", node: w1(), want: Deny, wantReason: ReasonSubjectMismatch, wantMessage: "attribute 2.5.4.11",
			edit: func(t *testing.T, csr *certificatesv1.CertificateSigningRequest) {
				s := honestSubject()
				s.extra = []pkix.AttributeTypeAndValue{{Type: asn1.ObjectIdentifier{2, 5, 4, 11}, Value: "ops"}}
				csr.Spec.Request = request(t, s)
			}},
		{name: "email SAN", node: w1(), want: Deny, wantReason: ReasonForbiddenSAN,
			edit: func(t *testing.T, csr *certificatesv1.CertificateSigningRequest) {
				s := honestSubject()
				s.emails = []string{"root@w1"}
				csr.Spec.Request = request(t, s)
			}},
		{name: "URI SAN", node: w1(), want: Deny, wantReason: ReasonForbiddenSAN,
			edit: func(t *testing.T, csr *certificatesv1.CertificateSigningRequest) {
				s := honestSubject()
				s.uris = []string{"spiffe://cluster.local/ns/kube-system/sa/default"}
				csr.Spec.Request = request(t, s)
			}},
		{name: "no SAN", node: w1(), want: Deny, wantReason: ReasonNoSAN,
			edit: func(t *testing.T, csr *certificatesv1.CertificateSigningRequest) {
				s := honestSubject()
				s.dns, s.ips = nil, nil
				csr.Spec.Request = request(t, s)
			}},
		{name: "not PEM", node: w1(), want: Deny, wantReason: ReasonBadRequest,
			edit: func(_ *testing.T, csr *certificatesv1.CertificateSigningRequest) { csr.Spec.Request = []byte("hello") }},
		{name: "signature broken", node: w1(), want: Deny, wantReason: ReasonBadRequest, wantMessage: "signature",
			edit: func(_ *testing.T, csr *certificatesv1.CertificateSigningRequest) {
				block, _ := pem.Decode(csr.Spec.Request)
				block.Bytes[len(block.Bytes)-1] ^= 0xff
				csr.Spec.Request = pem.EncodeToMemory(block)
			}},
		{name: "another signer, however forged", node: w1(), want: Ignore,
			edit: func(t *testing.T, csr *certificatesv1.CertificateSigningRequest) {
				s := honestSubject()
				s.cn, s.orgs = "kubernetes-admin", []string{"system:masters"}
				csr.Spec.Request = request(t, s)
				csr.Spec.SignerName = certificatesv1.KubeAPIServerClientSignerName
				csr.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth}
			}},
		{name: "approved already", node: w1(), want: Ignore,
			edit: func(_ *testing.T, csr *certificatesv1.CertificateSigningRequest) {
				csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue}}
			}},
		{name: "denied already, even if honest", node: w1(), want: Ignore,
			edit: func(_ *testing.T, csr *certificatesv1.CertificateSigningRequest) {
				csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue}}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			csr := servingCSR(t, "csr-1", honestSubject())
			if tc.edit != nil {
				tc.edit(t, csr)
			}
			got := Decide(csr, tc.node)
			if got.Verdict != tc.want || got.Reason != tc.wantReason || !strings.Contains(got.Message, tc.wantMessage) {
				t.Errorf("Decide = %+v, want verdict %s, reason %q, a message containing %q", got, tc.want, tc.wantReason, tc.wantMessage)
			}
			if got.Verdict != Ignore && got.Message == "" {
				t.Errorf("Decide = %+v: no message", got)
			}
			if strings.Contains(got.Message, "BEGIN") {
				t.Errorf("message holds PEM: %q", got.Message)
			}
		})
	}
}

func TestNodeName(t *testing.T) {
	for user, want := range map[string]string{
		"system:node:w1":      "w1",
		"system:node:":        "",
		"system:nodes":        "",
		"kubernetes-admin":    "",
		"system:node:w1.a.io": "w1.a.io",
	} {
		csr := &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{Username: user}}
		if got := NodeName(csr); got != want {
			t.Errorf("NodeName(%q) = %q, want %q", user, got, want)
		}
	}
}
