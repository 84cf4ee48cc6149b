package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"fmt"
	"slices"
	"strings"

	"github.com/kubeboot/kubeboot/internal/config"
)

// KeyMismatch is an existing leaf certificate, or the client certificate of
// a kubeconfig, whose key is not of the configured algorithm. Ensure keeps
// such keys; Renew with new keys replaces them. CAs are never re-keyed, so
// they are not listed.
type KeyMismatch struct {
	// Name is the CertSpec or kubeconfig name, for Renew.
	Name string
	// File is the file as messages name it, e.g. "apiserver.crt".
	File string
	// Have is the key's algorithm; Want is certificates.keyAlgorithm.
	Have, Want config.KeyAlgorithm
}

// KeyMismatches lists the named leaves and kubeconfigs of have (nil names:
// all of them) whose key is not of cfg's key algorithm. Missing or
// unreadable files are left to Ensure, which creates or reports them.
func KeyMismatches(cfg *config.ClusterConfiguration, have Set, names []string) []KeyMismatch {
	var out []KeyMismatch
	named := func(name string) bool { return names == nil || slices.Contains(names, name) }
	add := func(name, file string, spec CertSpec, certPEM []byte) {
		cert, err := parseCert(certPEM)
		if err != nil {
			return
		}
		if got := keyAlgorithm(cert.PublicKey); got != spec.Algorithm {
			out = append(out, KeyMismatch{Name: name, File: file, Have: got, Want: spec.Algorithm})
		}
	}
	for _, s := range CertSpecs(cfg) {
		if s.Usage != UsageCA && named(s.Name) {
			add(s.Name, s.File(), s, have.Certs[s.Name].Cert)
		}
	}
	for _, k := range KubeconfigSpecs(cfg) {
		if !named(k.Name) {
			continue // not parsed: a kubeconfig costs a YAML decode
		}
		if cert, err := embeddedCert(have.Kubeconfigs[k.Name]); err == nil {
			add(k.Name, k.Name, k.Client, cert)
		}
	}
	return out
}

// keyAlgorithm names a public key as certificates.keyAlgorithm does; a
// key kubeboot would not generate gets a descriptive name.
func keyAlgorithm(pub crypto.PublicKey) config.KeyAlgorithm {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		return config.KeyAlgorithm(fmt.Sprintf("rsa-%d", k.N.BitLen()))
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return config.ECDSAP256
		case elliptic.P384():
			return config.ECDSAP384
		}
		return config.KeyAlgorithm("ecdsa-" + strings.ToLower(k.Curve.Params().Name))
	}
	return config.KeyAlgorithm(fmt.Sprintf("%T", pub))
}
