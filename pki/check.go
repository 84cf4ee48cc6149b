package pki

import (
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"time"
)

// CheckError says why an existing certificate or kubeconfig cannot be reused.
type CheckError struct {
	// File is the file's name relative to its directory, e.g. "apiserver.crt".
	File string
	// Problems lists every difference found, e.g. "lacks IP SAN 10.0.0.5".
	Problems []string
	// Renewable is true when renewing fixes every problem. Otherwise a human
	// has to look: a file signed by another CA, a key that does not match,
	// an unreadable file, or any problem with a CA, which is never renewed.
	Renewable bool
}

// Error names the file, then its problems.
func (e *CheckError) Error() string {
	return e.File + ": " + strings.Join(e.Problems, "; ")
}

// findings collects the problems of one file.
type findings struct {
	file     string
	problems []string
	human    bool
}

func (f *findings) renewable(format string, args ...any) {
	f.problems = append(f.problems, fmt.Sprintf(format, args...))
}

func (f *findings) needsHuman(format string, args ...any) {
	f.renewable(format, args...)
	f.human = true
}

func (f *findings) err() error {
	if len(f.problems) == 0 {
		return nil
	}
	return &CheckError{File: f.file, Problems: f.problems, Renewable: !f.human}
}

// Check says whether an existing certificate can be reused: it returns nil,
// or a *CheckError that lists the differences from spec. For a leaf, caCert
// is the issuing CA's PEM certificate; for a CA it is ignored, and an absent
// key means external-CA mode. A certificate that expires within renewBefore
// of now is not reusable. SANs beyond the required ones are fine, and so is
// any subject of a CA, which the user may have provided.
func Check(spec CertSpec, pair KeyPair, caCert []byte, now time.Time, renewBefore time.Duration) error {
	f := &findings{file: spec.File()}
	var ca *x509.Certificate
	if spec.Usage != UsageCA {
		var err error
		if ca, err = parseCert(caCert); err != nil {
			f.needsHuman("cannot read %s.crt: %v", spec.CA, err)
			return f.err()
		}
		if len(pair.Key) == 0 {
			f.renewable("%s is missing", spec.KeyFile())
		}
	}
	checkCert(f, spec, pair, ca, now, renewBefore)
	return f.err()
}

// checkCert records the problems of a certificate and its key, which may
// be absent; ca is nil when spec is a CA.
func checkCert(f *findings, spec CertSpec, pair KeyPair, ca *x509.Certificate, now time.Time, renewBefore time.Duration) {
	cert, err := parseCert(pair.Cert)
	if err != nil {
		f.needsHuman("cannot parse certificate: %v", err)
		return
	}
	if len(pair.Key) > 0 {
		if key, err := parseKey(pair.Key); err != nil {
			f.needsHuman("cannot read %s: %v", spec.KeyFile(), err)
		} else if !publicKeysEqual(key.Public(), cert.PublicKey) {
			f.needsHuman("key does not match certificate")
		}
	}
	if ca == nil {
		checkCA(f, cert)
	} else {
		checkLeaf(f, spec, cert, ca)
	}
	checkValidity(f, cert, ca, now, renewBefore)
	if spec.Usage == UsageCA {
		// kubeboot never renews a CA.
		f.human = f.human || len(f.problems) > 0
	}
}

func checkCA(f *findings, cert *x509.Certificate) {
	if !cert.BasicConstraintsValid || !cert.IsCA {
		f.needsHuman("is not a CA certificate")
	}
	if cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		f.needsHuman("lacks key usage cert sign")
	}
}

func checkLeaf(f *findings, spec CertSpec, cert, ca *x509.Certificate) {
	if err := cert.CheckSignatureFrom(ca); err != nil {
		f.needsHuman("is not signed by %s.crt", spec.CA)
	}
	if cert.IsCA {
		f.renewable("is a CA certificate, want a leaf")
	}
	if cert.Subject.CommonName != spec.CN {
		f.renewable("wrong CN %q, want %q", cert.Subject.CommonName, spec.CN)
	}
	if got, want := sorted(cert.Subject.Organization), sorted(spec.Org); !slices.Equal(got, want) {
		f.renewable("wrong O %q, want %q", got, want)
	}
	if cert.KeyUsage&x509.KeyUsageDigitalSignature == 0 {
		f.renewable("lacks key usage digital signature")
	}
	for _, eku := range extKeyUsages(spec.Usage) {
		if !slices.Contains(cert.ExtKeyUsage, eku) && !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageAny) {
			f.renewable("lacks extended key usage %s", extKeyUsageNames[eku])
		}
	}
	for _, name := range spec.DNS {
		if !slices.Contains(cert.DNSNames, name) {
			f.renewable("lacks DNS SAN %s", name)
		}
	}
	for _, ip := range spec.IPs {
		if !containsIP(cert.IPAddresses, ip) {
			f.renewable("lacks IP SAN %s", ip)
		}
	}
}

// checkValidity wants a certificate valid now and beyond the renewal
// window, unless it is a leaf that expires with its CA (ca; nil for a CA):
// a renewal could not make it last longer, so only a new CA helps, and
// ExpiringCAs is what tells the user.
func checkValidity(f *findings, cert, ca *x509.Certificate, now time.Time, renewBefore time.Duration) {
	clamped := ca != nil && !cert.NotAfter.Before(ca.NotAfter)
	switch {
	case now.Before(cert.NotBefore):
		f.needsHuman("is not valid before %s: check the clock", cert.NotBefore.UTC().Format(time.RFC3339))
	case !now.Before(cert.NotAfter):
		f.renewable("expired on %s", day(cert.NotAfter))
	case cert.NotAfter.Sub(now) < renewBefore && !clamped:
		f.renewable("expires %s, within the renewal window of %s", day(cert.NotAfter), hours(renewBefore))
	}
}

// extKeyUsages are the extended key usages a certificate of usage needs.
func extKeyUsages(u Usage) []x509.ExtKeyUsage {
	switch u {
	case UsageServer:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	case UsageClient:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	case UsagePeer:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	return nil
}

var extKeyUsageNames = map[x509.ExtKeyUsage]string{
	x509.ExtKeyUsageServerAuth: "server auth",
	x509.ExtKeyUsageClientAuth: "client auth",
}

func sorted(s []string) []string {
	return slices.Sorted(slices.Values(s))
}

func day(t time.Time) string {
	return t.UTC().Format(time.DateOnly)
}

// hours prints a whole number of hours as "720h" rather than "720h0m0s".
func hours(d time.Duration) string {
	if d%time.Hour == 0 {
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return d.String()
}
