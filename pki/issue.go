package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"

	cfconfig "github.com/cloudflare/cfssl/config"
	"github.com/cloudflare/cfssl/csr"
	cferr "github.com/cloudflare/cfssl/errors"
	"github.com/cloudflare/cfssl/helpers"
	"github.com/cloudflare/cfssl/initca"
	cflog "github.com/cloudflare/cfssl/log"
	"github.com/cloudflare/cfssl/signer"
	"github.com/cloudflare/cfssl/signer/local"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubeboot/kubeboot/internal/config"
)

// cfsslQuiet silences cfssl once, before pki first calls it: cfssl logs
// every certificate it signs to stderr, and this package never prints.
var cfsslQuiet sync.Once

func quietCFSSL() { cfsslQuiet.Do(func() { cflog.Level = cflog.LevelFatal }) }

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
	quietCFSSL()
	req := &csr.CertificateRequest{CN: spec.CN, Names: subjectNames(spec.Org),
		CA: &csr.CAConfig{Expiry: spec.Validity.String()}}
	// initca backdates CAs by cfssl's default of five minutes.
	cert, _, err := initca.NewFromSigner(req, key.signer)
	if err != nil {
		return KeyPair{}, fmt.Errorf("create CA %q: %w", spec.Name, plain(err))
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
	quietCFSSL()
	if a.key == nil {
		return KeyPair{}, fmt.Errorf("issue certificate %q: %s.key is absent (external CA)", spec.Name, spec.CA)
	}
	hosts, err := hosts(spec)
	if err != nil {
		return KeyPair{}, fmt.Errorf("issue certificate %q: %w", spec.Name, err)
	}
	// A CSR is the only way into cfssl's signer: it takes the subject and
	// SANs from it and checks its signature. That costs a third of the CPU
	// with ECDSA keys and is noise next to generating RSA keys.
	req, err := csr.Generate(key.signer, &csr.CertificateRequest{CN: spec.CN, Names: subjectNames(spec.Org), Hosts: hosts})
	if err != nil {
		return KeyPair{}, fmt.Errorf("issue certificate %q: %w", spec.Name, plain(err))
	}
	s, err := local.NewSigner(a.key, a.cert, signer.DefaultSigAlgo(a.key), policy(spec.Validity))
	if err != nil {
		return KeyPair{}, fmt.Errorf("issue certificate %q: %w", spec.Name, plain(err))
	}
	sr := signer.SignRequest{Request: string(req), Profile: string(spec.Usage)}
	// A certificate that outlives its CA fails verification from then on,
	// so it might as well say so.
	if time.Now().Add(spec.Validity).After(a.cert.NotAfter) {
		sr.NotAfter = a.cert.NotAfter
	}
	cert, err := s.Sign(sr)
	if err != nil {
		return KeyPair{}, fmt.Errorf("issue certificate %q: %w", spec.Name, plain(err))
	}
	return KeyPair{Cert: cert, Key: key.pem}, nil
}

// policy holds one cfssl signing profile per leaf usage. The default
// profile has no usages, so an unknown profile name fails to sign.
func policy(validity time.Duration) *cfconfig.Signing {
	profile := func(extended ...string) *cfconfig.SigningProfile {
		return &cfconfig.SigningProfile{
			// Key encipherment as kubeadm sets it, for TLS 1.2 RSA key exchange.
			Usage:    append([]string{"digital signature", "key encipherment"}, extended...),
			Expiry:   validity,
			Backdate: backdate,
		}
	}
	return &cfconfig.Signing{
		Default: &cfconfig.SigningProfile{Expiry: validity},
		Profiles: map[string]*cfconfig.SigningProfile{
			string(UsageServer): profile("server auth"),
			string(UsageClient): profile("client auth"),
			string(UsagePeer):   profile("server auth", "client auth"),
		},
	}
}

func subjectNames(orgs []string) []csr.Name {
	var names []csr.Name
	for _, o := range orgs {
		names = append(names, csr.Name{O: o})
	}
	return names
}

// hosts renders the SANs as cfssl's host list, rejecting entries that
// cfssl would otherwise take for e-mail addresses, URIs or DNS names.
func hosts(spec CertSpec) ([]string, error) {
	var out []string
	for _, ip := range spec.IPs {
		if ip.To16() == nil {
			return nil, fmt.Errorf("invalid IP SAN %q", ip.String())
		}
		out = append(out, ip.String())
	}
	for _, name := range spec.DNS {
		check := validation.IsDNS1123Subdomain
		if strings.HasPrefix(name, "*.") {
			check = validation.IsWildcardDNS1123Subdomain
		}
		if msgs := check(name); len(msgs) > 0 {
			return nil, fmt.Errorf("invalid DNS SAN %q: %s", name, strings.Join(msgs, "; "))
		}
		out = append(out, name)
	}
	return out, nil
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
