package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Kubeconfig renders a kubeconfig file that embeds the CA certificate (all
// of caCert, so a chain stays a chain) and the client's certificate and key.
func Kubeconfig(spec KubeconfigSpec, caCert []byte, client KeyPair) ([]byte, error) {
	return renderKubeconfig(spec, caCert, &clientcmdapi.AuthInfo{ClientCertificateData: client.Cert, ClientKeyData: client.Key})
}

// RotatedKubeconfig renders spec's kubeconfig with the CA embedded, as
// Kubeconfig does, and a user that names certFile, which holds the client
// certificate and its key, instead of embedding them: kubelet.conf once
// the kubelet rotates its own certificate, as kubeadm's kubelet-finalize
// writes it.
func RotatedKubeconfig(spec KubeconfigSpec, caCert []byte, certFile string) ([]byte, error) {
	return renderKubeconfig(spec, caCert, &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: certFile})
}

// renderKubeconfig renders spec's kubeconfig: one cluster, trusting
// caCert, one user and the context of both.
func renderKubeconfig(spec KubeconfigSpec, caCert []byte, auth *clientcmdapi.AuthInfo) ([]byte, error) {
	user, context := spec.Client.CN, spec.Context()
	c := clientcmdapi.NewConfig()
	c.Clusters[spec.Cluster] = &clientcmdapi.Cluster{Server: spec.Server, CertificateAuthorityData: caCert}
	c.AuthInfos[user] = auth
	c.Contexts[context] = &clientcmdapi.Context{Cluster: spec.Cluster, AuthInfo: user}
	c.CurrentContext = context
	data, err := clientcmd.Write(*c)
	if err != nil {
		return nil, fmt.Errorf("render kubeconfig %q: %w", spec.Name, err)
	}
	return data, nil
}

// IssueKubeconfig issues a client certificate for spec with ca, which must
// include its key, and renders the kubeconfig around it. key is the PEM
// client key to keep; nil generates a new one.
func IssueKubeconfig(spec KubeconfigSpec, ca KeyPair, key []byte) ([]byte, error) {
	client, err := Issue(spec.Client, ca, key)
	if err != nil {
		return nil, err
	}
	return Kubeconfig(spec, ca.Cert, client)
}

// CheckKubeconfig says whether an existing kubeconfig can be reused, as
// Check does for a certificate: its current context must point at
// spec.Server, trust caCert, and embed a valid client certificate of
// spec.Client, signed by caCert, with its key. A kubeconfig whose
// certificate the kubelet rotates may name the kubelet's file instead
// (see checkRotated); files holds the files it names (Set.ClientFiles).
func CheckKubeconfig(spec KubeconfigSpec, data, caCert []byte, files map[string][]byte, now time.Time, renewBefore time.Duration) error {
	f := &findings{file: spec.Name}
	ca, err := parseCert(caCert)
	if err != nil {
		f.needsHuman("cannot read %s.crt: %v", spec.Client.CA, err)
		return f.err()
	}
	cluster, user, err := currentContext(data)
	if err != nil {
		f.needsHuman("%v", err)
		return f.err()
	}
	if cluster.Server != spec.Server {
		f.renewable("server is %q, want %q", cluster.Server, spec.Server)
	}
	if !trusts(cluster.CertificateAuthorityData, ca) {
		f.needsHuman("does not trust %s.crt", spec.Client.CA)
	}
	if file := rotatedFile(spec, user); file != "" {
		checkRotated(f, spec, user, files, ca, now)
		return f.err()
	}
	if len(user.ClientCertificateData) == 0 {
		f.needsHuman("embeds no client certificate")
		return f.err()
	}
	if len(user.ClientKeyData) == 0 {
		f.renewable("embeds no client key")
	}
	client := KeyPair{Cert: user.ClientCertificateData, Key: user.ClientKeyData}
	checkCert(f, spec.Client, client, ca, now, renewBefore)
	return f.err()
}

// currentContext returns the cluster and the user of a kubeconfig's
// current context. One run checks, dates and compares the same few
// kubeconfigs several times, so each is parsed once (parsedKubeconfigs);
// what it returns is shared and must not be changed.
func currentContext(data []byte) (*clientcmdapi.Cluster, *clientcmdapi.AuthInfo, error) {
	c, err := parsedKubeconfigs.load(data)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot parse: %w", err)
	}
	context := c.Contexts[c.CurrentContext]
	if context == nil {
		return nil, nil, fmt.Errorf("has no context %q", c.CurrentContext)
	}
	cluster, user := c.Clusters[context.Cluster], c.AuthInfos[context.AuthInfo]
	if cluster == nil || user == nil {
		return nil, nil, errors.New("its current context names a missing cluster or user")
	}
	return cluster, user, nil
}

// parsedKubeconfigs holds the kubeconfigs currentContext parsed, by
// content.
var parsedKubeconfigs = &kubeconfigMemo{}

// kubeconfigMemo is clientcmd.Load with its results kept, at most
// memoSize of them: a node has a handful of kubeconfigs, and parsing
// one costs a YAML decode, more than checking its certificate.
type kubeconfigMemo struct {
	mu     sync.Mutex
	parsed map[string]*clientcmdapi.Config
}

// memoSize bounds kubeconfigMemo: when full, it starts over.
const memoSize = 32

// load parses data as clientcmd.Load does, once per content.
func (m *kubeconfigMemo) load(data []byte) (*clientcmdapi.Config, error) {
	m.mu.Lock()
	c, ok := m.parsed[string(data)]
	m.mu.Unlock()
	if ok {
		return c, nil
	}
	c, err := clientcmd.Load(data)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.parsed == nil || len(m.parsed) >= memoSize {
		m.parsed = map[string]*clientcmdapi.Config{}
	}
	m.parsed[string(data)] = c
	return c, nil
}

// trusts reports whether a PEM bundle contains the CA certificate.
func trusts(bundle []byte, ca *x509.Certificate) bool {
	for len(bundle) > 0 {
		cert, rest, err := nextCert(bundle)
		if err != nil {
			return false
		}
		if cert.Equal(ca) {
			return true
		}
		bundle = rest
	}
	return false
}
