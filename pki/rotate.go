package pki

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kubeboot/kubeboot/internal/bundle"
	"github.com/kubeboot/kubeboot/internal/config"
)

// RotatedCAs names, in order, the CAs `certs rotate-ca` replaces; with an
// external etcd the etcd CA is not the cluster's and is left out.
func RotatedCAs(cfg *config.ClusterConfiguration) []string {
	var names []string
	for _, s := range CertSpecs(cfg) {
		if s.Usage == UsageCA {
			names = append(names, s.Name)
		}
	}
	return names
}

// Rotation is what a CA rotation moves a cluster to: a new CA for each of
// RotatedCAs, by name, and a new service-account key pair.
type Rotation struct {
	CAs            map[string]KeyPair
	ServiceAccount ServiceAccountKey
}

// NewRotation makes a Rotation's CAs, of the configured algorithm and
// validity, and its service-account key.
func NewRotation(cfg *config.ClusterConfiguration) (Rotation, error) {
	r := Rotation{CAs: map[string]KeyPair{}}
	for _, s := range CertSpecs(cfg) {
		if s.Usage != UsageCA {
			continue
		}
		pair, err := NewCA(s)
		if err != nil {
			return Rotation{}, err
		}
		r.CAs[s.Name] = pair
	}
	var err error
	r.ServiceAccount, err = NewServiceAccountKey(cfg.Certificates.KeyAlgorithm)
	return r, err
}

// The files of a Rotation as Files writes them: each public half by its
// own name, the private ones sealed together.
const (
	rotationSealed  = "keys.sealed"
	rotationWrapped = "key.wrapped"
	rotationSAPub   = "sa.pub"
)

// rotationFile is the file name of a rotated CA's certificate: its name
// with "/" turned to "-" (etcd-ca.crt), a valid ConfigMap or Secret key.
func rotationFile(name string) string {
	return strings.ReplaceAll(name, "/", "-") + ".crt"
}

// Files is r as files for the nodes: the new certificates and sa.pub in
// the clear, and the private keys sealed with a one-time key that is
// wrapped to oldCA (WrapKey), the cluster CA being rotated out, whose key
// only the control-plane nodes hold.
func (r Rotation) Files(oldCA []byte) (map[string][]byte, error) {
	key, err := bundle.NewKey()
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{rotationSAPub: r.ServiceAccount.Public}
	private := map[string][]byte{rotationSAPub: r.ServiceAccount.Private}
	for name, pair := range r.CAs {
		files[rotationFile(name)] = pair.Cert
		private[rotationFile(name)] = pair.Key
	}
	if files[rotationSealed], err = bundle.Seal(key, private); err != nil {
		return nil, err
	}
	if files[rotationWrapped], err = WrapKey(oldCA, key); err != nil {
		return nil, err
	}
	return files, nil
}

// PublicRotation reads the certificates and sa.pub of Files' output: what
// a node that holds no CA key trusts.
func PublicRotation(cfg *config.ClusterConfiguration, files map[string][]byte) (Rotation, error) {
	r := Rotation{CAs: map[string]KeyPair{}, ServiceAccount: ServiceAccountKey{Public: files[rotationSAPub]}}
	for _, name := range RotatedCAs(cfg) {
		cert := files[rotationFile(name)]
		if _, err := parseCert(cert); err != nil {
			return Rotation{}, fmt.Errorf("the rotation's %s: %w", rotationFile(name), err)
		}
		r.CAs[name] = KeyPair{Cert: cert}
	}
	if len(r.ServiceAccount.Public) == 0 {
		return Rotation{}, fmt.Errorf("the rotation has no %s", rotationSAPub)
	}
	return r, nil
}

// OpenRotation reads Files' output whole, opening its private keys with
// caKey, the key of the CA they were wrapped to, and checks that each key
// is its certificate's.
func OpenRotation(cfg *config.ClusterConfiguration, files map[string][]byte, caKey []byte) (Rotation, error) {
	r, err := PublicRotation(cfg, files)
	if err != nil {
		return Rotation{}, err
	}
	key, err := UnwrapKey(caKey, files[rotationWrapped])
	if err != nil {
		return Rotation{}, fmt.Errorf("open the rotation's keys with %s.key: %w", config.CertCA, err)
	}
	private, err := bundle.Open(key, files[rotationSealed])
	if err != nil {
		return Rotation{}, fmt.Errorf("open the rotation's keys: %w", err)
	}
	for name, pair := range r.CAs {
		pair.Key = private[rotationFile(name)]
		r.CAs[name] = pair
	}
	r.ServiceAccount.Private = private[rotationSAPub]
	return r, CheckRotation(r)
}

// CheckRotation fails unless each of r's keys is its certificate's, or
// its public key's.
func CheckRotation(r Rotation) error {
	for name, pair := range r.CAs {
		if _, err := parseAuthority(pair); err != nil {
			return fmt.Errorf("the rotation's %s: %w", name, err)
		}
	}
	if err := CheckServiceAccountKey(r.ServiceAccount); err != nil {
		return fmt.Errorf("the rotation's service-account key: %w", err)
	}
	return nil
}

// Bundle is the PEM bundle of first's blocks followed by those of others
// that first does not hold already: the file that trusts all of them, and
// whose first certificate (or public key) is the one in use.
func Bundle(first []byte, others ...[]byte) []byte {
	out := append([]byte(nil), first...)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	have := blocks(first)
	for _, o := range others {
		for _, b := range blocks(o) {
			if !containsBlock(have, b) {
				have = append(have, b)
				out = append(out, pem.EncodeToMemory(b)...)
			}
		}
	}
	return out
}

// First is the first PEM block of data, re-encoded alone: the certificate
// or public key in use of a bundle.
func First(data []byte) []byte {
	b := blocks(data)
	if len(b) == 0 {
		return nil
	}
	return pem.EncodeToMemory(b[0])
}

// Holds says whether the PEM bundle data holds every block of part.
func Holds(data, part []byte) bool {
	have := blocks(data)
	want := blocks(part)
	for _, b := range want {
		if !containsBlock(have, b) {
			return false
		}
	}
	return len(want) > 0
}

func blocks(data []byte) []*pem.Block {
	var out []*pem.Block
	for {
		b, rest := pem.Decode(data)
		if b == nil {
			return out
		}
		out = append(out, &pem.Block{Type: b.Type, Bytes: b.Bytes})
		data = rest
	}
}

func containsBlock(list []*pem.Block, b *pem.Block) bool {
	for _, have := range list {
		if have.Type == b.Type && bytes.Equal(have.Bytes, b.Bytes) {
			return true
		}
	}
	return false
}

// wrapInfo binds a wrapped key to its purpose in the key derivation.
const wrapInfo = "kubeboot rotate-ca key wrap"

// WrapKey encrypts key to the public key of the CA certificate caCert
// (the first of a bundle), so that only a holder of that CA's private key
// opens it (UnwrapKey): ECDH with a one-time key and AES-256-GCM for an
// ECDSA CA, RSA-OAEP with SHA-256 for an RSA one. It is how a CA rotation
// hands the new CAs' keys to the control-plane nodes through the cluster,
// where only the control-plane nodes hold the cluster CA's key.
func WrapKey(caCert, key []byte) ([]byte, error) {
	cert, err := parseCert(caCert)
	if err != nil {
		return nil, fmt.Errorf("wrap a key to the CA: %w", err)
	}
	switch pub := cert.PublicKey.(type) {
	case *rsa.PublicKey:
		return rsa.EncryptOAEP(sha256.New(), rand.Reader, pub, key, []byte(wrapInfo))
	case *ecdsa.PublicKey:
		peer, err := pub.ECDH()
		if err != nil {
			return nil, fmt.Errorf("wrap a key to the CA: %w", err)
		}
		eph, err := peer.Curve().GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		secret, err := eph.ECDH(peer)
		if err != nil {
			return nil, err
		}
		sealed, err := gcmSeal(secret, eph.PublicKey().Bytes(), key)
		if err != nil {
			return nil, err
		}
		return append(eph.PublicKey().Bytes(), sealed...), nil
	}
	return nil, fmt.Errorf("wrap a key to the CA: its key is a %T, neither RSA nor ECDSA", cert.PublicKey)
}

// UnwrapKey opens what WrapKey wrapped with the CA's PEM private key.
func UnwrapKey(caKey, wrapped []byte) ([]byte, error) {
	key, err := parseKey(caKey)
	if err != nil {
		return nil, err
	}
	switch k := key.(type) {
	case *rsa.PrivateKey:
		out, err := rsa.DecryptOAEP(sha256.New(), nil, k, wrapped, []byte(wrapInfo))
		if err != nil {
			return nil, errors.New("the wrapped key does not open with this CA's key: it was wrapped to another CA")
		}
		return out, nil
	case *ecdsa.PrivateKey:
		priv, err := k.ECDH()
		if err != nil {
			return nil, err
		}
		n := len(priv.PublicKey().Bytes())
		if len(wrapped) < n {
			return nil, errors.New("the wrapped key is truncated")
		}
		peer, err := priv.Curve().NewPublicKey(wrapped[:n])
		if err != nil {
			return nil, fmt.Errorf("the wrapped key's one-time key: %w", err)
		}
		secret, err := priv.ECDH(peer)
		if err != nil {
			return nil, err
		}
		return gcmOpen(secret, wrapped[:n], wrapped[n:])
	}
	return nil, fmt.Errorf("the CA's key is a %T, neither RSA nor ECDSA", key)
}

// gcmKey derives an AES-256 key from an ECDH secret and the one-time
// public key.
func gcmKey(secret, ephemeral []byte) (cipher.AEAD, error) {
	k, err := hkdf.Key(sha256.New, secret, ephemeral, wrapInfo, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCMWithRandomNonce(block)
}

func gcmSeal(secret, ephemeral, plain []byte) ([]byte, error) {
	aead, err := gcmKey(secret, ephemeral)
	if err != nil {
		return nil, err
	}
	return aead.Seal(nil, nil, plain, nil), nil
}

func gcmOpen(secret, ephemeral, sealed []byte) ([]byte, error) {
	aead, err := gcmKey(secret, ephemeral)
	if err != nil {
		return nil, err
	}
	out, err := aead.Open(nil, nil, sealed, nil)
	if err != nil {
		return nil, errors.New("the wrapped key does not open with this CA's key: it was wrapped to another CA")
	}
	return out, nil
}

// SignedBy says whether the PEM certificate cert is signed by the first
// certificate of the PEM bundle ca.
func SignedBy(cert, ca []byte) bool {
	c, err := parseCert(cert)
	if err != nil {
		return false
	}
	issuer, err := parseCert(ca)
	return err == nil && c.CheckSignatureFrom(issuer) == nil
}

// KubeconfigCA is the CA data of data's current context's cluster, or of
// its one cluster when it has no context, as cluster-info's kubeconfig:
// what a kubeconfig trusts.
func KubeconfigCA(data []byte) ([]byte, error) {
	c, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("cannot parse: %w", err)
	}
	cluster, err := trustedCluster(c)
	if err != nil {
		return nil, err
	}
	return cluster.CertificateAuthorityData, nil
}

// WithKubeconfigCA is the kubeconfig data with the CA data KubeconfigCA
// reads replaced by ca, and nothing else changed.
func WithKubeconfigCA(data, ca []byte) ([]byte, error) {
	c, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("cannot parse: %w", err)
	}
	cluster, err := trustedCluster(c)
	if err != nil {
		return nil, err
	}
	cluster.CertificateAuthorityData = ca
	return clientcmd.Write(*c)
}

// trustedCluster is c's current context's cluster, or its one cluster
// when it has no current context.
func trustedCluster(c *clientcmdapi.Config) (*clientcmdapi.Cluster, error) {
	if c.CurrentContext == "" && len(c.Clusters) == 1 {
		for _, cluster := range c.Clusters {
			return cluster, nil
		}
	}
	context := c.Contexts[c.CurrentContext]
	if context == nil {
		return nil, fmt.Errorf("has no context %q", c.CurrentContext)
	}
	if cluster := c.Clusters[context.Cluster]; cluster != nil {
		return cluster, nil
	}
	return nil, errors.New("its current context names a missing cluster")
}

// KubeconfigCert is a copy of the client certificate data's current
// context embeds, or nil.
func KubeconfigCert(data []byte) []byte {
	_, user, err := currentContext(data)
	if err != nil {
		return nil
	}
	return bytes.Clone(user.ClientCertificateData)
}

// RotationStep is a node's step of a CA rotation.
type RotationStep string

// A node's steps of a CA rotation, in order: trust the new CAs beside the
// old, sign with the new (a control-plane node, which reissues its
// certificates), have the kubelet's certificates signed by the new, and
// trust the new alone.
const (
	RotationTrust   RotationStep = "trust"
	RotationReissue RotationStep = "reissue"
	RotationKubelet RotationStep = "kubelet"
	RotationDrop    RotationStep = "drop"
)

// RotationSteps are the steps in order.
var RotationSteps = []RotationStep{RotationTrust, RotationReissue, RotationKubelet, RotationDrop}

// RotationClusterCA is the new cluster CA's certificate of Files' output,
// all that a worker, which trusts no other CA, reads of it.
func RotationClusterCA(files map[string][]byte) ([]byte, error) {
	cert := files[rotationFile(config.CertCA)]
	if _, err := parseCert(cert); err != nil {
		return nil, fmt.Errorf("the rotation's %s: %w", rotationFile(config.CertCA), err)
	}
	return cert, nil
}
