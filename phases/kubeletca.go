package phases

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate/csr"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/pki"
)

// KubeletServingFile is the serving certificate and key the kubelet
// requests of the cluster (serverTLSBootstrap), in its certificate
// directory.
const KubeletServingFile = "kubelet-server-current.pem"

// KubeletClient is a client with the identity of the kubelet's kubeconfig
// at the node path kubeconfig, whose certificate files are read under the
// run's root.
func KubeletClient(s *workflow.Run, kubeconfig string) (kubernetes.Interface, error) {
	data, err := s.Files.ReadFile(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", kubeconfig, err)
	}
	c, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kubeconfig, err)
	}
	for _, user := range c.AuthInfos {
		if user.ClientCertificate != "" {
			user.ClientCertificate = s.Files.HostPath(user.ClientCertificate)
		}
		if user.ClientKey != "" {
			user.ClientKey = s.Files.HostPath(user.ClientKey)
		}
	}
	rest, err := clientcmd.NewDefaultClientConfig(*c, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kubeconfig, err)
	}
	return kubernetes.NewForConfig(rest)
}

// RenewKubeletClientCert replaces the client certificate the kubelet's
// kubeconfig names (the one the kubelet rotates) with one the cluster's
// signer issues now, when it is not signed by the PEM certificate ca
// already: a new key, a CertificateSigningRequest with the kubelet's own
// identity, which the controller-manager approves (a node renewing its
// own certificate), and the certificate written in place of the old. A
// kubeconfig that embeds its certificate is kubeboot's to reissue, and
// left alone. It says whether it wrote.
func RenewKubeletClientCert(ctx context.Context, s *workflow.Run, kubeconfig string, ca []byte, timeout time.Duration) (bool, error) {
	data, err := s.Files.ReadFile(kubeconfig)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", kubeconfig, err)
	}
	files := pki.ClientFiles(data)
	if len(files) != 1 {
		return false, nil
	}
	current, err := s.Files.ReadFile(files[0])
	if err != nil {
		return false, fmt.Errorf("read %s, the kubelet's client certificate: %w", files[0], err)
	}
	if pki.SignedBy(current, ca) {
		return false, nil
	}
	old, err := firstCert(current)
	if err != nil {
		return false, fmt.Errorf("%s: %w", files[0], err)
	}
	client, err := KubeletClient(s, kubeconfig)
	if err != nil {
		return false, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return false, err
	}
	request, err := certutil.MakeCSR(key, &pkix.Name{CommonName: old.Subject.CommonName, Organization: old.Subject.Organization}, nil, nil)
	if err != nil {
		return false, err
	}
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	name, uid, err := csr.RequestCertificateWithContext(ctx, client, request, "", certificatesv1.KubeAPIServerClientKubeletSignerName, nil, usages, key)
	if err != nil {
		return false, fmt.Errorf("request the kubelet's client certificate: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cert, err := csr.WaitForCertificate(wctx, client, name, uid)
	if err != nil {
		return false, fmt.Errorf("wait for the certificate of CertificateSigningRequest %s, the kubelet's client certificate: %w (see `kubectl get csr %s`: the controller-manager approves and signs it)", name, err, name)
	}
	if !pki.SignedBy(cert, ca) {
		return false, fmt.Errorf("CertificateSigningRequest %s was signed by another CA than the new one: the controller-manager does not sign with the new CA yet", name)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return false, err
	}
	pair := append(append([]byte(nil), cert...), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})...)
	if err := s.Files.WriteFile(files[0], pair, pki.ModeKey); err != nil {
		return false, err
	}
	s.Report.Infof("%s: a client certificate the new CA signed (CertificateSigningRequest %s)", files[0], name)
	return true, nil
}

// DropKubeletServingCert removes the serving certificate the kubelet
// requested of the cluster (KubeletServingFile in certDir) when the PEM
// certificate ca did not sign it, so that the kubelet, restarted, requests
// one the new CA signs. It says whether it removed it.
func DropKubeletServingCert(s *workflow.Run, certDir string, ca []byte) (bool, error) {
	path := filepath.Join(certDir, KubeletServingFile)
	data, err := s.Files.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	if pki.SignedBy(data, ca) {
		return false, nil
	}
	if err := s.Files.Remove(path); err != nil {
		return false, err
	}
	s.Report.Infof("removed %s, which the old CA signed: the kubelet requests a new one when it starts", path)
	return true, nil
}

// RestartKubeletReady restarts kubelet.service and waits until its Node
// is Ready with a heartbeat since then, and, with servingDir set, until
// the kubelet holds a serving certificate there again that ca signed.
func RestartKubeletReady(ctx context.Context, s *workflow.Run, client kubernetes.Interface, node, servingDir string, ca []byte, timeout time.Duration) error {
	before, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get Node %s: %w", node, err)
	}
	restarted := time.Now()
	if err := systemctl(ctx, s.System, "restart", "kubelet"); err != nil {
		return err
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		if last = restartedKubelet(n, before.Status.NodeInfo.KubeletVersion, restarted); last != "" {
			return false, nil
		}
		if servingDir == "" {
			return true, nil
		}
		data, err := s.Files.ReadFile(filepath.Join(servingDir, KubeletServingFile))
		if last = "it has no serving certificate the new CA signed yet (see `kubectl get csr`)"; err == nil && pki.SignedBy(data, ca) {
			last = ""
		}
		return last == "", nil
	})
	if err != nil {
		return fmt.Errorf("wait for Node %s after the kubelet's restart: %s (see `journalctl -u kubelet`)", node, last)
	}
	s.Report.Infof("restarted kubelet.service: Node %s is Ready", node)
	return nil
}

// firstCert parses the first certificate of a PEM file.
func firstCert(data []byte) (*x509.Certificate, error) {
	for {
		block, rest := pem.Decode(data)
		if block == nil {
			return nil, errors.New("no PEM certificate found")
		}
		if block.Type == "CERTIFICATE" {
			return x509.ParseCertificate(block.Bytes)
		}
		data = rest
	}
}

// KubeletNode is the name of the node whose kubelet's kubeconfig is at
// the node path kubeconfig, from its client certificate's subject
// (system:node:NAME).
func KubeletNode(s *workflow.Run, kubeconfig string) (string, error) {
	data, err := s.Files.ReadFile(kubeconfig)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", kubeconfig, err)
	}
	cert := pki.KubeconfigCert(data)
	if files := pki.ClientFiles(data); cert == nil && len(files) > 0 {
		if cert, err = s.Files.ReadFile(files[0]); err != nil {
			return "", fmt.Errorf("read %s, the kubelet's client certificate: %w", files[0], err)
		}
	}
	c, err := firstCert(cert)
	if err != nil {
		return "", fmt.Errorf("%s's client certificate: %w", kubeconfig, err)
	}
	name, ok := strings.CutPrefix(c.Subject.CommonName, "system:node:")
	if !ok {
		return "", fmt.Errorf("%s's client certificate is %q's, not a node's", kubeconfig, c.Subject.CommonName)
	}
	return name, nil
}

// KubeletCertDirOf is the kubelet's certificate directory: that of the
// client certificate its kubeconfig (a node path) names, else the
// kubelet's default.
func KubeletCertDirOf(s *workflow.Run, kubeconfig string) string {
	data, err := s.Files.ReadFile(kubeconfig)
	if files := pki.ClientFiles(data); err == nil && len(files) > 0 && filepath.IsAbs(files[0]) {
		return filepath.Dir(files[0])
	}
	return config.DefaultKubeletCertDir
}
