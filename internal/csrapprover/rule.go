// Package csrapprover owns kubeboot's approver of kubelet serving
// certificates, and of the client certificates of node-bound joins.
// Kubernetes approves no kubernetes.io/kubelet-serving
// CertificateSigningRequest by itself, so a kubelet with serverTLSBootstrap
// never gets a serving certificate the API server can verify unless
// something approves it. A node-bound bootstrap token (BoundGroup) is not
// bound to the controller-manager's approval of client CSRs: its node's
// CSR is approved here, for that node's name alone, once. The package
// holds the rules that tell a node's honest request from any other
// (Decide), and the controller that watches CSRs and approves or denies
// them through the approval subresource (Controller). It never prints and
// never touches disk: decisions go to the caller's log function.
package csrapprover

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
)

// The identities of nodes, as the Node authorizer knows them.
const (
	// NodeUserPrefix starts the user name of every kubelet's client
	// certificate: system:node:<node name>.
	NodeUserPrefix = "system:node:"
	// NodesGroup is the group of every kubelet's client certificate, and
	// the only organization of its serving certificate.
	NodesGroup = "system:nodes"
)

// The groups of a node-bound bootstrap token, which joins one node alone:
// such a token is in BoundGroup, which may post a kubelet's client CSR but
// is not bound to the controller-manager's approval, and in its node's
// group, BoundNodeGroup(name). The approver approves its CSR for that
// node's name alone, once.
const (
	BoundGroup           = "system:bootstrappers:kubeboot:node-bound"
	boundNodeGroupPrefix = "system:bootstrappers:kubeboot:node:"
)

// BoundNodeGroup is the group of the token bound to node name. A group
// holds no dot, a node name no colon: the name's dots become colons.
func BoundNodeGroup(name string) string {
	return boundNodeGroupPrefix + strings.ReplaceAll(name, ".", ":")
}

// BoundNode is the node a CSR's requester is bound to: the node of its
// BoundNodeGroup, when it is in BoundGroup; bound is false for any other
// requester, and name "" for a bound one whose groups name no node or
// more than one.
func BoundNode(csr *certificatesv1.CertificateSigningRequest) (name string, bound bool) {
	if !slices.Contains(csr.Spec.Groups, BoundGroup) {
		return "", false
	}
	for _, g := range csr.Spec.Groups {
		if node, ok := strings.CutPrefix(g, boundNodeGroupPrefix); ok {
			if name != "" {
				return "", true
			}
			name = strings.ReplaceAll(node, ":", ".")
		}
	}
	return name, true
}

// Verdict is what the approver does with a CSR.
type Verdict string

// The verdicts.
const (
	// Ignore leaves the CSR alone: another signer's, or decided already.
	Ignore Verdict = "ignore"
	// Approve adds an Approved condition; the controller manager's
	// csrsigning controller then issues the certificate.
	Approve Verdict = "approve"
	// Deny adds a Denied condition, which is final: the kubelet has to
	// post a new CSR.
	Deny Verdict = "deny"
)

// The reasons of the conditions the approver adds, one per kind of
// failure, so that `kubectl get csr -o yaml` says which rule a CSR broke.
const (
	ReasonApproved          = "KubebootNodeServingCertificate"
	ReasonNotANode          = "RequesterNotANode"
	ReasonRequesterMismatch = "RequesterNotTheSubject"
	ReasonBadRequest        = "RequestNotParsable"
	ReasonSubjectMismatch   = "SubjectNotKubeletServing"
	ReasonForbiddenUsage    = "UsagesNotKubeletServing"
	ReasonForbiddenSAN      = "SANTypeForbidden"
	ReasonNoSAN             = "NoSAN"
	ReasonNodeNotFound      = "NodeNotFound"
	ReasonSANNotNodeAddress = "SANNotNodeAddress"
	// The reasons of a node-bound token's client CSR.
	ReasonBoundApproved     = "KubebootNodeBoundJoin"
	ReasonBoundNoNode       = "BoundTokenNamesNoNode"
	ReasonBoundNodeMismatch = "BoundTokenOfAnotherNode"
	ReasonBoundNodeExists   = "BoundNodeJoinedAlready"
)

// Decision is the verdict on one CSR and why, as the condition's reason
// and message; it never holds key material.
type Decision struct {
	Verdict Verdict
	// Reason is the condition's machine-readable reason (one of the
	// Reason constants); empty for Ignore.
	Reason string
	// Message says why, for people.
	Message string
}

// servingUsages are the usages a kubelet serving certificate may have:
// digital signature and server auth always, and key encipherment, which
// the kubelet asks for with an RSA key.
var servingUsages = []certificatesv1.KeyUsage{
	certificatesv1.UsageDigitalSignature,
	certificatesv1.UsageKeyEncipherment,
	certificatesv1.UsageServerAuth,
}

// nodeAddressTypes are the Node addresses a serving certificate may name.
var nodeAddressTypes = []corev1.NodeAddressType{
	corev1.NodeHostName, corev1.NodeInternalIP, corev1.NodeExternalIP, corev1.NodeInternalDNS, corev1.NodeExternalDNS,
}

// The subject attributes a kubelet serving certificate has.
var (
	oidCommonName   = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidOrganization = asn1.ObjectIdentifier{2, 5, 4, 10}
)

// NodeName is the node a CSR was requested by, from its requester's user
// name (system:node:<name>); "" when the requester is not a node. It is the
// Node whose addresses Decide needs.
func NodeName(csr *certificatesv1.CertificateSigningRequest) string {
	name, ok := strings.CutPrefix(csr.Spec.Username, NodeUserPrefix)
	if !ok {
		return ""
	}
	return name
}

// Decide applies the approval rules to csr, given the Node it needs (see
// Node; nil when there is none). A CSR approved or denied already, or of
// another signer than kubernetes.io/kubelet-serving and
// kubernetes.io/kube-apiserver-client-kubelet, is ignored; a client CSR
// is decided by decideBoundClient. A serving CSR is approved only when
// all of these hold, and denied, naming the first that fails, otherwise:
//   - its requester is a node: user system:node:<name>, in group system:nodes;
//   - its request is a PEM certificate request with a valid signature,
//     whose subject is exactly CN=system:node:<name>, O=system:nodes, for
//     the requesting node's name;
//   - its usages are digital signature and server auth, and optionally key
//     encipherment, and nothing else;
//   - it asks for no email address and no URI, and for at least one DNS
//     name or IP address;
//   - the Node exists, and every DNS name and IP address asked for is one
//     of its status addresses of type Hostname, InternalIP, ExternalIP,
//     InternalDNS or ExternalDNS (DNS names compared case-insensitively).
//     The SANs may be a subset of those addresses, not necessarily all.
func Decide(csr *certificatesv1.CertificateSigningRequest, node *corev1.Node) Decision {
	if decided(csr) {
		return Decision{Verdict: Ignore, Message: "approved or denied already"}
	}
	switch csr.Spec.SignerName {
	case certificatesv1.KubeletServingSignerName:
		return decideServing(csr, node)
	case certificatesv1.KubeAPIServerClientKubeletSignerName:
		return decideBoundClient(csr, node)
	}
	return Decision{Verdict: Ignore, Message: fmt.Sprintf("signer %s is neither %s nor %s", csr.Spec.SignerName, certificatesv1.KubeletServingSignerName, certificatesv1.KubeAPIServerClientKubeletSignerName)}
}

// Node is the Node a decision on csr needs, "" when it needs none: the
// requesting node of a serving CSR, the bound node of a node-bound
// token's client CSR.
func Node(csr *certificatesv1.CertificateSigningRequest) string {
	switch csr.Spec.SignerName {
	case certificatesv1.KubeletServingSignerName:
		return NodeName(csr)
	case certificatesv1.KubeAPIServerClientKubeletSignerName:
		name, _ := BoundNode(csr)
		return name
	}
	return ""
}

// clientUsages are the usages a kubelet client certificate may have:
// client auth and digital signature always, and key encipherment, which
// the kubelet asks for with an RSA key.
var clientUsages = []certificatesv1.KeyUsage{
	certificatesv1.UsageDigitalSignature,
	certificatesv1.UsageKeyEncipherment,
	certificatesv1.UsageClientAuth,
}

// decideBoundClient decides a kubelet client CSR, given the Node of its
// bound name (nil when there is none). Only a CSR of a node-bound token
// is decided: the controller-manager approves a cluster-wide token's, and
// a node's renewal of its own. It is approved only when all of these
// hold, and denied, naming the first that fails, otherwise:
//   - the token's groups name one node;
//   - its request is a PEM certificate request with a valid signature,
//     whose subject is exactly CN=system:node:<that node>, O=system:nodes;
//   - its usages are client auth and digital signature, and optionally
//     key encipherment, and it asks for no SAN;
//   - no Node of that name exists: the token joins its node once, and a
//     node that is reset joins again once its Node is deleted.
func decideBoundClient(csr *certificatesv1.CertificateSigningRequest, node *corev1.Node) Decision {
	name, bound := BoundNode(csr)
	if !bound {
		return Decision{Verdict: Ignore, Message: fmt.Sprintf("requested by %s, whose token is bound to no node", csr.Spec.Username)}
	}
	if name == "" {
		return deny(ReasonBoundNoNode, "requested by %s in %s, whose groups name no node (or more than one) in %s<node>", csr.Spec.Username, BoundGroup, boundNodeGroupPrefix)
	}
	req, err := parseRequest(csr.Spec.Request)
	if err != nil {
		return deny(ReasonBadRequest, "%v", err)
	}
	if cn := req.Subject.CommonName; cn != NodeUserPrefix+name {
		return deny(ReasonBoundNodeMismatch, "requested by %s with the token bound to node %s, for %q: a node-bound token joins its own node alone", csr.Spec.Username, name, cn)
	}
	if !slices.Equal(req.Subject.Organization, []string{NodesGroup}) || len(req.Subject.Names) != 2 {
		return deny(ReasonSubjectMismatch, "subject %q is not CN=%s%s, O=%s", req.Subject, NodeUserPrefix, name, NodesGroup)
	}
	for _, u := range csr.Spec.Usages {
		if !slices.Contains(clientUsages, u) {
			return deny(ReasonForbiddenUsage, "usage %q is not one of a kubelet client certificate (%s)", u, joinUsages(clientUsages))
		}
	}
	if !slices.Contains(csr.Spec.Usages, certificatesv1.UsageClientAuth) {
		return deny(ReasonForbiddenUsage, "usages %s lack %q", joinUsages(csr.Spec.Usages), certificatesv1.UsageClientAuth)
	}
	if len(req.DNSNames) > 0 || len(req.IPAddresses) > 0 || len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return deny(ReasonForbiddenSAN, "asks for SANs, which a kubelet client certificate never has")
	}
	if node != nil && node.Name == name {
		return deny(ReasonBoundNodeExists, "requested by %s with the token bound to node %s, whose Node exists: the token joined it already; delete the Node to join it again", csr.Spec.Username, name)
	}
	return Decision{Verdict: Approve, Reason: ReasonBoundApproved,
		Message: fmt.Sprintf("kubeboot csr-approver: node %s's client certificate, asked with the token bound to it", name)}
}

// decideServing decides a kubelet serving CSR, as Decide says.
func decideServing(csr *certificatesv1.CertificateSigningRequest, node *corev1.Node) Decision {
	name := NodeName(csr)
	if name == "" {
		return deny(ReasonNotANode, "requested by %s, not by a node (user %s<name> in group %s)", csr.Spec.Username, NodeUserPrefix, NodesGroup)
	}
	if !slices.Contains(csr.Spec.Groups, NodesGroup) {
		return deny(ReasonNotANode, "requested by %s outside group %s", csr.Spec.Username, NodesGroup)
	}
	req, err := parseRequest(csr.Spec.Request)
	if err != nil {
		return deny(ReasonBadRequest, "%v", err)
	}
	if d, ok := checkSubject(req.Subject, csr.Spec.Username, name); !ok {
		return d
	}
	if d, ok := checkUsages(csr.Spec.Usages); !ok {
		return d
	}
	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return deny(ReasonForbiddenSAN, "asks for email addresses or URIs, which a kubelet serving certificate never has")
	}
	if len(req.DNSNames) == 0 && len(req.IPAddresses) == 0 {
		return deny(ReasonNoSAN, "asks for no DNS name and no IP address")
	}
	if node == nil || node.Name != name {
		return deny(ReasonNodeNotFound, "Node %s not found", name)
	}
	addresses := nodeAddresses(node)
	for _, dns := range req.DNSNames {
		if !slices.ContainsFunc(addresses, func(a string) bool { return strings.EqualFold(a, dns) }) {
			return deny(ReasonSANNotNodeAddress, "SAN %s is not an address of Node %s", dns, name)
		}
	}
	for _, ip := range req.IPAddresses {
		if !slices.ContainsFunc(addresses, func(a string) bool { return ip.Equal(net.ParseIP(a)) }) {
			return deny(ReasonSANNotNodeAddress, "SAN %s is not an address of Node %s", ip, name)
		}
	}
	return Decision{Verdict: Approve, Reason: ReasonApproved,
		Message: fmt.Sprintf("kubeboot csr-approver: a serving certificate of node %s for its own addresses", name)}
}

func deny(reason, format string, args ...any) Decision {
	return Decision{Verdict: Deny, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// decided says whether csr has an Approved or a Denied condition.
func decided(csr *certificatesv1.CertificateSigningRequest) bool {
	return slices.ContainsFunc(csr.Status.Conditions, func(c certificatesv1.CertificateSigningRequestCondition) bool {
		return c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied
	})
}

// parseRequest decodes the PEM certificate request and checks its
// signature, which proves that the requester holds the key.
func parseRequest(data []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("the request is not a PEM CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse certificate request: %w", err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Errorf("check certificate request signature: %w", err)
	}
	return req, nil
}

// checkSubject wants CN=<user> (system:node:<name>), O=system:nodes and
// nothing else.
func checkSubject(subject pkix.Name, user, name string) (Decision, bool) {
	if cn := subject.CommonName; cn != user {
		if other, ok := strings.CutPrefix(cn, NodeUserPrefix); ok && other != "" {
			return deny(ReasonRequesterMismatch, "requested by %s, not by node %s", user, other), false
		}
		return deny(ReasonSubjectMismatch, "subject CN %q is not %s", cn, user), false
	}
	if !slices.Equal(subject.Organization, []string{NodesGroup}) {
		return deny(ReasonSubjectMismatch, "subject O %q is not [%s]", subject.Organization, NodesGroup), false
	}
	for _, attr := range subject.Names {
		if !attr.Type.Equal(oidCommonName) && !attr.Type.Equal(oidOrganization) {
			return deny(ReasonSubjectMismatch, "subject of node %s has attribute %s besides CN and O", name, attr.Type), false
		}
	}
	return Decision{}, true
}

// checkUsages wants the usages of a serving certificate and no other.
func checkUsages(usages []certificatesv1.KeyUsage) (Decision, bool) {
	for _, u := range usages {
		if !slices.Contains(servingUsages, u) {
			return deny(ReasonForbiddenUsage, "usage %q is not one of a kubelet serving certificate (%s)", u, joinUsages(servingUsages)), false
		}
	}
	for _, u := range []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth} {
		if !slices.Contains(usages, u) {
			return deny(ReasonForbiddenUsage, "usages %s lack %q", joinUsages(usages), u), false
		}
	}
	return Decision{}, true
}

func joinUsages(usages []certificatesv1.KeyUsage) string {
	s := make([]string, len(usages))
	for i, u := range usages {
		s[i] = string(u)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// nodeAddresses lists the Node's addresses a serving certificate may name.
func nodeAddresses(node *corev1.Node) []string {
	var out []string
	for _, a := range node.Status.Addresses {
		if slices.Contains(nodeAddressTypes, a.Type) && a.Address != "" {
			out = append(out, a.Address)
		}
	}
	return out
}
