package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"time"
	"unicode"

	"github.com/cloudflare/cfssl/csr"
	cferr "github.com/cloudflare/cfssl/errors"
	"github.com/cloudflare/cfssl/helpers"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubeboot/kubeboot/internal/config"
)

// backdate moves NotBefore into the past, so that a node whose clock is a
// little behind still accepts a certificate issued a moment ago.
const backdate = 5 * time.Minute

// KeyPair is a PEM certificate and its PEM private key.
type KeyPair struct {
	Cert []byte
	// Key is nil where the key is absent, as for a CA in external-CA mode.
	Key []byte
}

// keyRequests maps the configured algorithms onto cfssl's key requests.
var keyRequests = map[config.KeyAlgorithm]csr.KeyRequest{
	config.ECDSAP256: {A: "ecdsa", S: 256},
	config.ECDSAP384: {A: "ecdsa", S: 384},
	config.RSA2048:   {A: "rsa", S: 2048},
	config.RSA3072:   {A: "rsa", S: 3072},
	config.RSA4096:   {A: "rsa", S: 4096},
}

// privateKey is a private key with its PEM encoding.
type privateKey struct {
	signer crypto.Signer
	pem    []byte
}

func newKey(alg config.KeyAlgorithm) (privateKey, error) {
	kr, ok := keyRequests[alg]
	if !ok {
		return privateKey{}, fmt.Errorf("unsupported key algorithm %q", alg)
	}
	generated, err := kr.Generate()
	if err != nil {
		return privateKey{}, fmt.Errorf("generate %s key: %w", alg, err)
	}
	key := generated.(crypto.Signer)
	var block *pem.Block
	switch k := key.(type) {
	case *rsa.PrivateKey:
		block = &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}
	case *ecdsa.PrivateKey:
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return privateKey{}, fmt.Errorf("encode %s key: %w", alg, err)
		}
		block = &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}
	}
	return privateKey{signer: key, pem: pem.EncodeToMemory(block)}, nil
}

// reuseKey parses an existing PEM key, or generates a new one when there is none.
func reuseKey(alg config.KeyAlgorithm, keyPEM []byte) (privateKey, error) {
	if len(keyPEM) == 0 {
		return newKey(alg)
	}
	key, err := parseKey(keyPEM)
	return privateKey{signer: key, pem: keyPEM}, err
}

// NewCA creates a self-signed CA with a new key.
func NewCA(spec CertSpec) (KeyPair, error) {
	auth, err := createCA(spec, nil)
	if err != nil {
		return KeyPair{}, err
	}
	return auth.pair, nil
}

// createCA self-signs a CA for keyPEM, or for a new key when it is nil.
func createCA(spec CertSpec, keyPEM []byte) (*authority, error) {
	key, err := reuseKey(spec.Algorithm, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("create CA %q: %w", spec.Name, err)
	}
	pair, err := selfSign(spec, key)
	if err != nil {
		return nil, err
	}
	cert, err := parseCert(pair.Cert)
	if err != nil {
		return nil, fmt.Errorf("create CA %q: %w", spec.Name, err)
	}
	return &authority{pair: pair, cert: cert, key: key.signer}, nil
}

func selfSign(spec CertSpec, key privateKey) (KeyPair, error) {
	tmpl := &x509.Certificate{
		Subject:  pkix.Name{CommonName: spec.CN, Organization: spec.Org},
		IsCA:     true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	cert, err := sign(tmpl, spec.Validity, key.signer.Public(), nil, key.signer)
	if err != nil {
		return KeyPair{}, fmt.Errorf("create CA %q: %w", spec.Name, err)
	}
	return KeyPair{Cert: cert, Key: key.pem}, nil
}

// Issue issues the leaf certificate of spec, signed by ca. key is the PEM
// private key to certify, so that a renewal can keep it; nil generates a
// new key of spec.Algorithm.
func Issue(spec CertSpec, ca KeyPair, key []byte) (KeyPair, error) {
	if spec.Usage == UsageCA {
		return KeyPair{}, fmt.Errorf("issue certificate %q: a CA is created with NewCA", spec.Name)
	}
	auth, err := parseAuthority(ca)
	if err != nil {
		return KeyPair{}, fmt.Errorf("issue certificate %q: CA %q: %w", spec.Name, spec.CA, err)
	}
	k, err := reuseKey(spec.Algorithm, key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("issue certificate %q: %w", spec.Name, err)
	}
	return auth.issue(spec, k)
}

// authority is a parsed CA. Its key is nil in external-CA mode.
type authority struct {
	pair KeyPair
	cert *x509.Certificate
	key  crypto.Signer
}

func parseAuthority(pair KeyPair) (*authority, error) {
	cert, err := parseCert(pair.Cert)
	if err != nil {
		return nil, err
	}
	a := &authority{pair: pair, cert: cert}
	if len(pair.Key) == 0 {
		return a, nil
	}
	if a.key, err = parseKey(pair.Key); err != nil {
		return nil, err
	}
	if !publicKeysEqual(a.key.Public(), cert.PublicKey) {
		return nil, errors.New("key does not match certificate")
	}
	return a, nil
}

func (a *authority) issue(spec CertSpec, key privateKey) (KeyPair, error) {
	if a.key == nil {
		return KeyPair{}, fmt.Errorf("issue certificate %q: %s.key is absent (external CA)", spec.Name, spec.CA)
	}
	usages := extKeyUsages(spec.Usage)
	if usages == nil {
		return KeyPair{}, fmt.Errorf("issue certificate %q: unknown usage %q", spec.Name, spec.Usage)
	}
	ips, dns, err := sans(spec)
	if err != nil {
		return KeyPair{}, fmt.Errorf("issue certificate %q: %w", spec.Name, err)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: spec.CN, Organization: spec.Org},
		DNSNames:    dns,
		IPAddresses: ips,
		// Key encipherment as kubeadm sets it, for TLS 1.2 RSA key exchange.
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: usages,
	}
	// A certificate that outlives its CA fails verification from then on,
	// so it might as well say so.
	if time.Now().Add(spec.Validity).After(a.cert.NotAfter) {
		tmpl.NotAfter = a.cert.NotAfter
	}
	cert, err := sign(tmpl, spec.Validity, key.signer.Public(), a.cert, a.key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("issue certificate %q: %w", spec.Name, err)
	}
	return KeyPair{Cert: cert, Key: key.pem}, nil
}

// sign certifies pub with key as tmpl says, issued by parent, or
// self-signed when parent is nil, and returns the PEM certificate. It
// fills in what cfssl's signer, which kubeboot used before, filled in: a
// random serial of 159 bits, the subject key ID, basic constraints,
// NotBefore backdated from the minute and, unless tmpl sets it, NotAfter
// validity after that, and the signature algorithm of key's size.
func sign(tmpl *x509.Certificate, validity time.Duration, pub crypto.PublicKey, parent *x509.Certificate, key crypto.Signer) ([]byte, error) {
	serial := make([]byte, 20)
	if _, err := rand.Read(serial); err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	serial[0] &= 0x7f // positive, as RFC 5280 4.1.2.2 requires
	ski, err := subjectKeyID(pub)
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = new(big.Int).SetBytes(serial)
	tmpl.SubjectKeyId = ski
	tmpl.BasicConstraintsValid = true
	tmpl.SignatureAlgorithm = signatureAlgorithm(key.Public())
	tmpl.NotBefore = time.Now().Round(time.Minute).Add(-backdate).UTC()
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = tmpl.NotBefore.Add(validity)
	}
	tmpl.NotAfter = tmpl.NotAfter.UTC()
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// subjectKeyID is the SHA-1 of the public key's bits (RFC 5280 4.2.1.2,
// method 1).
func subjectKeyID(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encode public key: %w", err)
	}
	var info struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	if _, err := asn1.Unmarshal(der, &info); err != nil {
		return nil, fmt.Errorf("decode public key: %w", err)
	}
	sum := sha1.Sum(info.PublicKey.Bytes)
	return sum[:], nil
}

// signatureAlgorithm is the algorithm a key signs with: the hash grows
// with an RSA key's size and an ECDSA key's curve.
func signatureAlgorithm(pub crypto.PublicKey) x509.SignatureAlgorithm {
	switch pub := pub.(type) {
	case *rsa.PublicKey:
		switch size := pub.N.BitLen(); {
		case size >= 4096:
			return x509.SHA512WithRSA
		case size >= 3072:
			return x509.SHA384WithRSA
		}
		return x509.SHA256WithRSA
	case *ecdsa.PublicKey:
		switch pub.Curve {
		case elliptic.P384():
			return x509.ECDSAWithSHA384
		case elliptic.P521():
			return x509.ECDSAWithSHA512
		}
		return x509.ECDSAWithSHA256
	case ed25519.PublicKey:
		return x509.PureEd25519
	}
	return x509.UnknownSignatureAlgorithm // CreateCertificate picks the key's default
}

// sans are spec's SANs, rejecting an IP that is none and a DNS name that
// is not a DNS-1123 subdomain (or a wildcard of one).
func sans(spec CertSpec) ([]net.IP, []string, error) {
	for _, ip := range spec.IPs {
		if ip.To16() == nil {
			return nil, nil, fmt.Errorf("invalid IP SAN %q", ip.String())
		}
	}
	for _, name := range spec.DNS {
		check := validation.IsDNS1123Subdomain
		if strings.HasPrefix(name, "*.") {
			check = validation.IsWildcardDNS1123Subdomain
		}
		if msgs := check(name); len(msgs) > 0 {
			return nil, nil, fmt.Errorf("invalid DNS SAN %q: %s", name, strings.Join(msgs, "; "))
		}
	}
	return spec.IPs, spec.DNS, nil
}

// plain turns cfssl's errors, whose text is a JSON object, into their
// message, lower-cased like Go errors unless it starts with an acronym.
func plain(err error) error {
	var cf *cferr.Error
	if !errors.As(err, &cf) {
		return err
	}
	msg := cf.Message
	if len(msg) > 1 && unicode.IsUpper(rune(msg[0])) && unicode.IsLower(rune(msg[1])) {
		msg = strings.ToLower(msg[:1]) + msg[1:]
	}
	return errors.New(msg)
}

// parseCert parses the first certificate of a PEM file, so that a CA file
// may carry its chain after it.
func parseCert(data []byte) (*x509.Certificate, error) {
	cert, _, err := nextCert(data)
	return cert, err
}

// nextCert parses the first certificate of a PEM bundle and returns the rest.
func nextCert(data []byte) (*x509.Certificate, []byte, error) {
	for {
		block, rest := pem.Decode(data)
		if block == nil {
			return nil, nil, errors.New("no PEM certificate found")
		}
		if block.Type == "CERTIFICATE" {
			cert, err := x509.ParseCertificate(block.Bytes)
			return cert, rest, err
		}
		data = rest
	}
}

func parseKey(data []byte) (crypto.Signer, error) {
	key, err := helpers.ParsePrivateKeyPEM(data)
	if err != nil {
		return nil, fmt.Errorf("parse private key: %w", plain(err))
	}
	return key, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	k, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(b)
}
