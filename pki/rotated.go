package pki

import (
	"crypto/x509"
	"encoding/pem"
	"strings"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeletClientFile is the file, in the kubelet's certificate directory
// (its --cert-dir), that holds the client certificate the kubelet rotates
// and its key: a symlink to the newest kubelet-client-<time>.pem.
const KubeletClientFile = "kubelet-client-current.pem"

// ClientFiles returns the files a kubeconfig's current user names for its
// client certificate and key instead of embedding them: the kubelet's
// pair, one file for both, in a kubelet.conf that kubelet-finalize has
// pointed at it. It returns nil for a kubeconfig that embeds them or that
// cannot be read.
func ClientFiles(kubeconfig []byte) []string {
	_, user, err := currentContext(kubeconfig)
	if err != nil || len(user.ClientCertificateData) > 0 || user.ClientCertificate == "" {
		return nil
	}
	files := []string{user.ClientCertificate}
	if user.ClientKey != "" && user.ClientKey != user.ClientCertificate {
		files = append(files, user.ClientKey)
	}
	return files
}

// rotatedFile is the client certificate file user names in a kubeconfig
// of spec whose certificate the kubelet rotates, or "" when the
// kubeconfig embeds its certificate or is not the kubelet's.
func rotatedFile(spec KubeconfigSpec, user *clientcmdapi.AuthInfo) string {
	if !spec.KubeletRotates || len(user.ClientCertificateData) > 0 {
		return ""
	}
	return user.ClientCertificate
}

// rotatedKubeconfigFile is rotatedFile for a kubeconfig's content.
func rotatedKubeconfigFile(spec KubeconfigSpec, kubeconfig []byte) string {
	_, user, err := currentContext(kubeconfig)
	if err != nil {
		return ""
	}
	return rotatedFile(spec, user)
}

// checkRotated records the problems of a kubeconfig whose user names the
// kubelet's own client certificate file: the certificate must be ca's, of
// spec's identity, with its key, and valid now. Renewing it is the
// kubelet's work, so no renewal window applies, and no renewal of
// kubeboot's fixes a problem: each needs a human, told how to start over
// from an embedded certificate.
func checkRotated(f *findings, spec KubeconfigSpec, user *clientcmdapi.AuthInfo, files map[string][]byte, ca *x509.Certificate, now time.Time) {
	file := user.ClientCertificate
	pair := KeyPair{Cert: files[file], Key: privateKeyPEM(files[user.ClientKey])}
	cert := &findings{}
	switch {
	case len(pair.Cert) == 0:
		cert.renewable("does not exist")
	case user.ClientKey == "":
		cert.renewable("the kubeconfig names no client key")
	case len(pair.Key) == 0:
		cert.renewable("no private key in %s", user.ClientKey)
	default:
		checkCert(cert, spec.Client, pair, ca, now, 0)
	}
	for _, p := range cert.problems {
		f.renewable("client certificate %s: %s", file, p)
	}
	if len(f.problems) > 0 {
		f.needsHuman("the kubelet rotates that certificate, kubeboot does not renew it: to start over, stop the kubelet, remove %s and %s, "+
			"run `kubeboot init phase kubeconfig` (an embedded certificate), start the kubelet and run `kubeboot init phase kubelet-finalize`", spec.Name, file)
	}
}

// privateKeyPEM is the first private key of a PEM file that may hold
// certificates before it, as the kubelet's pair file does; nil when it
// holds none.
func privateKeyPEM(data []byte) []byte {
	for rest := data; ; {
		block, next := pem.Decode(rest)
		if block == nil {
			return nil
		}
		if strings.HasSuffix(block.Type, "PRIVATE KEY") {
			return pem.EncodeToMemory(block)
		}
		rest = next
	}
}
