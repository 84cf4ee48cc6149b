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
// spec's identity, with its key, and valid now (see checkPair). Renewing
// it is the kubelet's work, so no renewal of kubeboot's fixes a problem:
// each needs a human, told how to start over from an embedded certificate.
func checkRotated(f *findings, spec KubeconfigSpec, user *clientcmdapi.AuthInfo, files map[string][]byte, ca *x509.Certificate, now time.Time) {
	file := user.ClientCertificate
	pair := &findings{}
	if user.ClientKey == "" {
		pair.renewable("the kubeconfig names no client key")
	} else {
		checkPair(pair, spec, KeyPair{Cert: files[file], Key: privateKeyPEM(files[user.ClientKey])}, user.ClientKey, ca, now)
	}
	for _, p := range pair.problems {
		f.renewable("client certificate %s: %s", file, p)
	}
	if len(f.problems) > 0 {
		f.needsHuman("the kubelet rotates that certificate, kubeboot does not renew it: to start over, stop the kubelet, remove %s and %s, "+
			"run `kubeboot init phase kubeconfig` (an embedded certificate), start the kubelet and run `kubeboot init phase kubelet-finalize`", spec.Name, file)
	}
}

// CheckRotatedPair says whether pair, the content of file, which holds a
// client certificate the kubelet rotates and its key (KubeletClientFile),
// is what a kubeconfig of spec may name: a certificate from caCert of
// spec's identity, with its key, valid now. No renewal window applies:
// renewing it is the kubelet's work. It returns nil or a *CheckError for
// file.
func CheckRotatedPair(spec KubeconfigSpec, file string, pair, caCert []byte, now time.Time) error {
	f := &findings{file: file}
	ca, err := parseCert(caCert)
	if err != nil {
		f.needsHuman("cannot read %s.crt: %v", spec.Client.CA, err)
		return f.err()
	}
	checkPair(f, spec, KeyPair{Cert: pair, Key: privateKeyPEM(pair)}, file, ca, now)
	return f.err()
}

// checkPair records the problems of the kubelet's client certificate and
// its key, from keyFile: they must exist, be ca's, of spec's identity, and
// be valid now.
func checkPair(f *findings, spec KubeconfigSpec, pair KeyPair, keyFile string, ca *x509.Certificate, now time.Time) {
	switch {
	case len(pair.Cert) == 0:
		f.renewable("does not exist")
	case len(pair.Key) == 0:
		f.renewable("no private key in %s", keyFile)
	default:
		checkCert(f, spec.Client, pair, ca, now, 0)
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
