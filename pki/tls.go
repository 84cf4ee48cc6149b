package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// ClientTLS builds the TLS configuration of a client that verifies its
// servers against caPEM (none: the system roots) and, when certPEM is set,
// presents that certificate with keyPEM. It is the one place kubeboot's
// clients (health probes, the etcd client) turn PEM into TLS.
func ClientTLS(caPEM, certPEM, keyPEM []byte) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caPEM != nil {
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(caPEM) {
			return nil, errors.New("read CA: no PEM certificate in it")
		}
	}
	if certPEM != nil {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
