package pki

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// What joining nodes are given: the pin of the cluster CA and the two
// kubeconfigs of node join discovery. None of them holds a private key.

// CAHashPrefix starts every CA pin, as `--discovery-token-ca-cert-hash`
// takes it.
const CAHashPrefix = "sha256:"

// CACertHash is the pin of a CA certificate for
// `join --discovery-token-ca-cert-hash`: "sha256:" and the hex SHA-256 of
// the certificate's SubjectPublicKeyInfo (DER). Pinning the public key
// rather than the certificate keeps the pin valid when the CA is re-issued
// with the same key. caCert is PEM; its first certificate counts.
func CACertHash(caCert []byte) (string, error) {
	cert, err := parseCert(caCert)
	if err != nil {
		return "", fmt.Errorf("hash CA certificate: %w", err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return CAHashPrefix + hex.EncodeToString(sum[:]), nil
}

// ClusterInfoKubeconfig renders the kubeconfig of the kube-public
// cluster-info ConfigMap: the cluster's CA and server in one unnamed cluster,
// and no context or user. Joining nodes read it anonymously; the
// controller-manager's bootstrapsigner signs it with each bootstrap token.
func ClusterInfoKubeconfig(server string, caCert []byte) ([]byte, error) {
	c := clientcmdapi.NewConfig()
	c.Clusters[""] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caCert}
	data, err := clientcmd.Write(*c)
	if err != nil {
		return nil, fmt.Errorf("render cluster-info kubeconfig: %w", err)
	}
	return data, nil
}

// BootstrapUser names the user of a discovery kubeconfig, as kubeadm names
// the user of its TLS bootstrap kubeconfig.
const BootstrapUser = "tls-bootstrap-token-user"

// DiscoveryKubeconfig renders what `join --discovery-file` reads: the
// cluster's CA and server, and a user that authenticates with the
// bootstrap token, in a current context. A joining node trusts the CA in
// the file and uses the token for its TLS bootstrap.
func DiscoveryKubeconfig(clusterName, server string, caCert []byte, token string) ([]byte, error) {
	c := clientcmdapi.NewConfig()
	context := BootstrapUser + "@" + clusterName
	c.Clusters[clusterName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caCert}
	c.AuthInfos[BootstrapUser] = &clientcmdapi.AuthInfo{Token: token}
	c.Contexts[context] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: BootstrapUser}
	c.CurrentContext = context
	data, err := clientcmd.Write(*c)
	if err != nil {
		// clientcmd's errors name fields, never their values.
		return nil, fmt.Errorf("render discovery kubeconfig: %w", err)
	}
	return data, nil
}
