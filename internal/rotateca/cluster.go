package rotateca

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"os"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate/csr"

	"github.com/kubeboot/kubeboot/internal/atomicfile"
	"github.com/kubeboot/kubeboot/internal/nodepod"
	"github.com/kubeboot/kubeboot/pki"
)

// clusterInfo is the ConfigMap a joining node discovers the cluster CA
// from, and the key of its kubeconfig.
const (
	clusterInfoName = "cluster-info"
	clusterInfoKey  = "kubeconfig"
)

// kubeadmCerts is the Secret of `init phase upload-certs`: the cluster's
// CAs for a joining control-plane node, the old ones until it expires.
const kubeadmCerts = "kubeadm-certs"

// trust has every node trust the new CAs beside the old, then the
// cluster-info ConfigMap and this run's kubeconfig; the kubeadm-certs
// Secret, which would hand a joining control-plane node the old CAs, is
// removed.
func (r *Rotation) trust(ctx context.Context) error {
	if err := r.nodes(ctx, pki.RotationTrust, false); err != nil {
		return err
	}
	if err := r.setClusterInfoCA(ctx, func(cur []byte) []byte { return pki.Bundle(cur, r.newCA) }); err != nil {
		return err
	}
	err := r.client.CoreV1().Secrets(metav1.NamespaceSystem).Delete(ctx, kubeadmCerts, metav1.DeleteOptions{})
	switch {
	case err == nil:
		r.report.Infof("removed kube-system/%s, which holds the old CAs: upload the certificates again (`kubeboot init phase upload-certs`) for a control-plane node to join after the rotation", kubeadmCerts)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("remove kube-system/%s: %w", kubeadmCerts, err)
	}
	return r.setAdminCA(func(cur []byte) []byte { return pki.Bundle(cur, r.newCA) })
}

// drop has every node trust the new CAs alone, then the cluster-info
// ConfigMap and this run's kubeconfig.
func (r *Rotation) drop(ctx context.Context) error {
	if err := r.nodes(ctx, pki.RotationDrop, false); err != nil {
		return err
	}
	if err := r.setClusterInfoCA(ctx, func([]byte) []byte { return r.newCA }); err != nil {
		return err
	}
	return r.setAdminCA(func([]byte) []byte { return r.newCA })
}

// clusterInfoCA is the CA data of kube-public/cluster-info.
func (r *Rotation) clusterInfoCA(ctx context.Context) ([]byte, error) {
	cm, err := r.client.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, clusterInfoName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read kube-public/%s, which names the cluster CA: %w", clusterInfoName, err)
	}
	ca, err := pki.KubeconfigCA([]byte(cm.Data[clusterInfoKey]))
	if err != nil {
		return nil, fmt.Errorf("kube-public/%s: %w", clusterInfoName, err)
	}
	return ca, nil
}

// setClusterInfoCA sets the CA data of kube-public/cluster-info to what
// trust returns for it; the controller-manager signs it again for the
// bootstrap tokens.
func (r *Rotation) setClusterInfoCA(ctx context.Context, trust func([]byte) []byte) error {
	cms := r.client.CoreV1().ConfigMaps(metav1.NamespacePublic)
	return nodepod.Retry(ctx, r.opts.Poll, func() error {
		cm, err := cms.Get(ctx, clusterInfoName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("read kube-public/%s: %w", clusterInfoName, err)
		}
		data := []byte(cm.Data[clusterInfoKey])
		ca, err := pki.KubeconfigCA(data)
		if err != nil {
			return fmt.Errorf("kube-public/%s: %w", clusterInfoName, err)
		}
		want := trust(ca)
		if string(want) == string(ca) {
			return nil
		}
		out, err := pki.WithKubeconfigCA(data, want)
		if err != nil {
			return fmt.Errorf("kube-public/%s: %w", clusterInfoName, err)
		}
		cm.Data[clusterInfoKey] = string(out)
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update kube-public/%s: %w", clusterInfoName, err)
		}
		r.report.Infof("kube-public/%s trusts %d CA certificates", clusterInfoName, len(certsOf(want)))
		return nil
	})
}

// setAdminCA sets the CA data of this run's kubeconfig to what trust
// returns for it, and takes up a client of the file as written.
func (r *Rotation) setAdminCA(trust func([]byte) []byte) error {
	return r.rewriteAdmin(func(c *kubeconfigFile) error {
		c.cluster.CertificateAuthorityData = trust(c.cluster.CertificateAuthorityData)
		return nil
	})
}

// adminKubeconfig gives this run's kubeconfig a client certificate of the
// new CA, of the same subject, through a CertificateSigningRequest to the
// API server's client signer, which this run approves as an
// administrator; it trusts the new CA first from then on. A kubeconfig
// without a client certificate (a token's) keeps its credential.
func (r *Rotation) adminKubeconfig(ctx context.Context) error {
	return r.rewriteAdmin(func(c *kubeconfigFile) error {
		c.cluster.CertificateAuthorityData = pki.Bundle(r.newCA, c.cluster.CertificateAuthorityData)
		if len(c.user.ClientCertificateData) == 0 {
			r.report.Infof("%s has no client certificate to renew: it keeps its credential", r.admin.Kubeconfig)
			return nil
		}
		if pki.SignedBy(c.user.ClientCertificateData, r.newCA) {
			return nil
		}
		cert, key, err := r.requestClientCert(ctx, c.user.ClientCertificateData)
		if err != nil {
			return err
		}
		c.user.ClientCertificateData, c.user.ClientKeyData = cert, key
		r.report.Infof("%s: a client certificate the new CA signed", r.admin.Kubeconfig)
		return nil
	})
}

// requestClientCert is a certificate of old's subject from the cluster's
// client signer, approved by this run, and its new key.
func (r *Rotation) requestClientCert(ctx context.Context, old []byte) ([]byte, []byte, error) {
	block, _ := pem.Decode(old)
	if block == nil {
		return nil, nil, fmt.Errorf("%s: its client certificate does not parse", r.admin.Kubeconfig)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: its client certificate: %w", r.admin.Kubeconfig, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	request, err := certutil.MakeCSR(key, &pkix.Name{CommonName: cert.Subject.CommonName, Organization: cert.Subject.Organization}, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	name, uid, err := csr.RequestCertificateWithContext(ctx, r.client, request, "", certificatesv1.KubeAPIServerClientSignerName, nil, usages, key)
	if err != nil {
		return nil, nil, fmt.Errorf("request a client certificate for %s: %w (a system:masters identity, as super-admin.conf's, cannot be requested: run with admin.conf)", r.admin.Kubeconfig, err)
	}
	csrs := r.client.CertificatesV1().CertificateSigningRequests()
	err = nodepod.Retry(ctx, r.opts.Poll, func() error {
		req, err := csrs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		req.Status.Conditions = append(req.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "KubebootRotateCA",
			Message: "kubeboot certs rotate-ca renews the certificate of its administrator's kubeconfig"})
		_, err = csrs.UpdateApproval(ctx, name, req, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("approve CertificateSigningRequest %s: %w", name, err)
	}
	wctx, cancel := context.WithTimeout(ctx, r.opts.NodeTimeout)
	defer cancel()
	signed, err := csr.WaitForCertificate(wctx, r.client, name, uid)
	if err != nil {
		return nil, nil, fmt.Errorf("wait for the certificate of CertificateSigningRequest %s: %w", name, err)
	}
	if !pki.SignedBy(signed, r.newCA) {
		return nil, nil, fmt.Errorf("CertificateSigningRequest %s was signed by another CA than the new one: the controller-manager does not sign with it yet", name)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return signed, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// kubeconfigFile is this run's kubeconfig, parsed, with its current
// context's cluster and user.
type kubeconfigFile struct {
	cluster *clientcmdapi.Cluster
	user    *clientcmdapi.AuthInfo
}

// rewriteAdmin changes this run's kubeconfig file with change, writes it
// in place, whole or not at all, and takes up a client of it.
func (r *Rotation) rewriteAdmin(change func(*kubeconfigFile) error) error {
	path := r.admin.Kubeconfig
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	c, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	ctx := c.Contexts[c.CurrentContext]
	if ctx == nil || c.Clusters[ctx.Cluster] == nil || c.AuthInfos[ctx.AuthInfo] == nil {
		return fmt.Errorf("%s: its current context names no cluster or user", path)
	}
	before, err := clientcmd.Write(*c)
	if err != nil {
		return err
	}
	if err := change(&kubeconfigFile{cluster: c.Clusters[ctx.Cluster], user: c.AuthInfos[ctx.AuthInfo]}); err != nil {
		return err
	}
	after, err := clientcmd.Write(*c)
	if err != nil {
		return err
	}
	if string(after) == string(before) {
		return nil
	}
	if err := atomicfile.WriteFile(path, after, info.Mode().Perm()); err != nil {
		return err
	}
	client, err := r.admin.Client(path)
	if err != nil {
		return err
	}
	r.client, r.record.Client = client, client
	r.report.Infof("%s trusts %d CA certificates", path, len(certsOf(c.Clusters[ctx.Cluster].CertificateAuthorityData)))
	return nil
}

// certsOf are the certificates of a PEM bundle.
func certsOf(data []byte) [][]byte {
	var out [][]byte
	for {
		block, rest := pem.Decode(data)
		if block == nil {
			return out
		}
		if block.Type == "CERTIFICATE" {
			out = append(out, block.Bytes)
		}
		data = rest
	}
}

// wait polls done until it says yes or timeout passes, saying why not.
func (r *Rotation) wait(ctx context.Context, timeout time.Duration, what string, done func() (string, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		pending, err := done()
		if err == nil && pending == "" {
			return nil
		}
		if err != nil {
			pending = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s within %s: %s", what, timeout, pending)
		}
		if err := nodepod.Sleep(ctx, r.opts.Poll); err != nil {
			return err
		}
	}
}
