package worker

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/discovery"
	"github.com/kubeboot/kubeboot/pki"
)

// nodeUserPrefix starts the user name of a kubelet's client certificate,
// system:node:<node name>, as the Node authorizer reads it.
const nodeUserPrefix = "system:node:"

// kubeconfigIdentity is what a kubeconfig on this node says about it.
type kubeconfigIdentity struct {
	// caHash is the pin of the CA it trusts.
	caHash string
	// node is the node name of its client certificate, or "" when it has
	// none this process can read, or one of another user.
	node string
	// expires is when that client certificate expires.
	expires time.Time
}

// joined says whether the kubeconfig is this node's own credential in
// cluster c: the kubelet holds a client certificate of c, valid now, as
// this node. A nil identity (no file) is not joined.
func (k *kubeconfigIdentity) joined(w *config.WorkerConfiguration, c *discovery.Cluster) bool {
	return k != nil && k.caHash == c.CAHash && k.node == w.Node.Name && time.Now().Before(k.expires)
}

// readKubeletConf reads this node's kubelet.conf; nil when there is none.
func readKubeletConf(s *Node, w *config.WorkerConfiguration) (*kubeconfigIdentity, error) {
	return readIdentity(s, w.KubeconfigPath(config.KubeconfigKubelet))
}

// readIdentity reads the kubeconfig at path, whose CA and client
// certificate may be embedded or files, as the kubelet writes them; nil
// when there is no such file.
func readIdentity(s *Node, path string) (*kubeconfigIdentity, error) {
	data, err := s.Files.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", path, err)
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("read %q: not a kubeconfig: %w", path, err)
	}
	current := cfg.Contexts[cfg.CurrentContext]
	if current == nil || cfg.Clusters[current.Cluster] == nil {
		return nil, fmt.Errorf("read %q: its current context %q names no cluster", path, cfg.CurrentContext)
	}
	cluster := cfg.Clusters[current.Cluster]
	ca := cluster.CertificateAuthorityData
	if len(ca) == 0 && cluster.CertificateAuthority != "" {
		if ca, err = s.Files.ReadFile(cluster.CertificateAuthority); err != nil {
			return nil, fmt.Errorf("read the CA of %q: %w", path, err)
		}
	}
	hash, err := pki.CACertHash(ca)
	if err != nil {
		return nil, fmt.Errorf("read the CA of %q: %w", path, err)
	}
	id := &kubeconfigIdentity{caHash: hash}
	user := cfg.AuthInfos[current.AuthInfo]
	if user == nil {
		return id, nil
	}
	cert := user.ClientCertificateData
	if len(cert) == 0 && user.ClientCertificate != "" {
		// The kubelet's rotating pair; unreadable is no identity.
		cert, _ = s.Files.ReadFile(user.ClientCertificate)
	}
	for len(cert) > 0 {
		var block *pem.Block
		if block, cert = pem.Decode(cert); block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if parsed, err := x509.ParseCertificate(block.Bytes); err == nil {
			if node, ok := strings.CutPrefix(parsed.Subject.CommonName, nodeUserPrefix); ok {
				id.node, id.expires = node, parsed.NotAfter
			}
		}
		break
	}
	return id, nil
}

// Joined says whether this worker has joined its cluster already, without
// asking the cluster: its join ended (the wait for its Node removed
// bootstrap-kubelet.conf), and its kubelet.conf holds a client certificate
// of this node's name, valid now, from the cluster CA on the node
// (CAPath). A bootstrap at a later boot has nothing to do then, even once
// the token it joined with has expired. A join whose kubelet got its
// certificate but whose Node never became Ready has not joined: the next
// attempt runs the join again, and waits for the Node.
func Joined(s *Node) (bool, error) {
	w := s.Config
	if _, err := os.Lstat(s.Files.HostPath(w.KubeconfigPath(config.KubeconfigBootstrapKubelet))); !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	own, err := readKubeletConf(s, w)
	if err != nil || own == nil {
		return false, err
	}
	ca, err := s.Files.ReadFile(w.CAPath())
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	hash, err := pki.CACertHash(ca)
	if err != nil {
		return false, fmt.Errorf("read the cluster CA %q: %w", w.CAPath(), err)
	}
	return own.caHash == hash && own.node == w.Node.Name && time.Now().Before(own.expires), nil
}

// Bootstrap is a worker's join at boot (`kubeboot bootstrap`): the join,
// unless the node has joined already; at a later boot its kubelet has its
// own credentials, and the token it joined with may have expired.
func Bootstrap(ctx context.Context, n *Node) ([]string, error) {
	joined, err := Joined(n)
	if err != nil {
		return nil, err
	}
	if joined {
		n.Report.Infof("this node has joined its cluster: %s holds its client certificate; nothing to do", n.Config.KubeconfigPath(config.KubeconfigKubelet))
		return nil, nil
	}
	return JoinWorkflow.Run(ctx, n, nil)
}
