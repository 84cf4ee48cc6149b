package pki

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
)

// Expiration describes one certificate of the node, for `kubeboot certs
// check-expiration`.
type Expiration struct {
	// Name is the CertSpec name, or the kubeconfig name for the client
	// certificate it embeds.
	Name string
	// CA is the issuing CA's name; empty for a CA.
	CA       string
	NotAfter time.Time
	// Residual is the time left; negative once expired.
	Residual time.Duration
	// External is true when kubeboot lacks the key to renew the
	// certificate: the issuing CA's key, or for a CA its own.
	External bool
	// File is, for a kubeconfig that names its client certificate's file
	// rather than embedding it, that file: the certificate the kubelet
	// rotates, which kubeboot does not renew.
	File string
	// Missing is true when the file does not exist.
	Missing bool
	// Err is set when the file exists but cannot be read.
	Err error
}

// Expirations lists every certificate of CertSpecs and every client
// certificate of a kubeconfig of KubeconfigSpecs, embedded or, for
// kubelet.conf, the kubelet's own file that it names, in that order.
func Expirations(cfg *config.ClusterConfiguration, have Set, now time.Time) []Expiration {
	hasKey := func(name string) bool { return len(have.Certs[name].Key) > 0 }
	var out []Expiration
	for _, s := range CertSpecs(cfg) {
		e := Expiration{Name: s.Name, CA: s.CA, External: !hasKey(s.CA)}
		if s.Usage == UsageCA {
			e.External = !hasKey(s.Name)
		}
		out = append(out, expiration(e, have.Certs[s.Name].Cert, now))
	}
	for _, k := range KubeconfigSpecs(cfg) {
		out = append(out, kubeconfigExpiration(k, have, now))
	}
	return out
}

// KubeletExpiration is the Expiration of kubelet.conf's client
// certificate, as Expirations lists it: the one the kubelet rotates, once
// kubelet.conf names its file.
func KubeletExpiration(cfg *config.ClusterConfiguration, have Set, now time.Time) Expiration {
	specs := KubeconfigSpecs(cfg)
	return kubeconfigExpiration(specs[slices.IndexFunc(specs, func(k KubeconfigSpec) bool { return k.KubeletRotates })], have, now)
}

// kubeconfigExpiration is the Expiration of the client certificate of
// have's kubeconfig of spec, which it parses once: the certificate it
// embeds, or the kubelet's file it names.
func kubeconfigExpiration(spec KubeconfigSpec, have Set, now time.Time) Expiration {
	e := Expiration{Name: spec.Name, CA: spec.Client.CA, External: len(have.Certs[spec.Client.CA].Key) == 0}
	data := have.Kubeconfigs[spec.Name]
	if len(data) == 0 {
		return expiration(e, nil, now)
	}
	_, user, err := currentContext(data)
	if err != nil {
		e.Err = fmt.Errorf("read kubeconfig %q: %w", spec.Name, err)
		return e
	}
	if e.File = rotatedFile(spec, user); e.File != "" {
		return expiration(e, have.ClientFiles[e.File], now)
	}
	if len(user.ClientCertificateData) == 0 {
		e.Err = fmt.Errorf("read kubeconfig %q: %w", spec.Name, errNoClientCert)
		return e
	}
	return expiration(e, user.ClientCertificateData, now)
}

func expiration(e Expiration, certPEM []byte, now time.Time) Expiration {
	if len(certPEM) == 0 {
		e.Missing = true
		return e
	}
	cert, err := parseCert(certPEM)
	if err != nil {
		e.Err = fmt.Errorf("read certificate %q: %w", e.Name, err)
		return e
	}
	e.NotAfter = cert.NotAfter
	e.Residual = cert.NotAfter.Sub(now)
	return e
}

// errNoClientCert is the error of a kubeconfig that embeds no client
// certificate.
var errNoClientCert = errors.New("embeds no client certificate")

// embeddedCert returns the client certificate of a kubeconfig, nil for an
// absent file.
func embeddedCert(kubeconfig []byte) ([]byte, error) {
	if len(kubeconfig) == 0 {
		return nil, nil
	}
	_, user, err := currentContext(kubeconfig)
	if err != nil {
		return nil, err
	}
	if len(user.ClientCertificateData) == 0 {
		return nil, errNoClientCert
	}
	return user.ClientCertificateData, nil
}

// ExpiringCAs returns the Expirations of the CAs in have that expire
// within cfg's renewal window. Every certificate such a CA issues is cut
// short to its expiry and no renewal extends it: only a new CA helps,
// which kubeboot never makes on its own.
func ExpiringCAs(cfg *config.ClusterConfiguration, have Set, now time.Time) []Expiration {
	var out []Expiration
	for _, s := range CertSpecs(cfg) {
		if s.Usage != UsageCA {
			continue
		}
		e := expiration(Expiration{Name: s.Name, External: len(have.Certs[s.Name].Key) == 0}, have.Certs[s.Name].Cert, now)
		if !e.Missing && e.Err == nil && e.Residual < cfg.Certificates.RenewBefore.Duration {
			out = append(out, e)
		}
	}
	return out
}
