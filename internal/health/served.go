package health

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
)

// ServedCertificate connects to the target's first endpoint and returns
// the certificate the component serves, verified against the target's CA.
// After a certificate renewal and restart it tells whether the running
// instance has loaded the new file.
func ServedCertificate(ctx context.Context, t Target, hostPath func(string) string) (*x509.Certificate, error) {
	if len(t.Endpoints) == 0 {
		return nil, fmt.Errorf("read served certificate of %s: no endpoint", t.Component)
	}
	u, err := url.Parse(t.Endpoints[0])
	if err != nil {
		return nil, fmt.Errorf("parse endpoint %q: %w", t.Endpoints[0], err)
	}
	if hostPath == nil {
		hostPath = func(p string) string { return p }
	}
	cfg, err := loadTLS(tlsFiles{ca: hostFile(t.CAFile, hostPath), cert: hostFile(t.CertFile, hostPath), key: hostFile(t.KeyFile, hostPath)})
	if err != nil {
		return nil, fmt.Errorf("read served certificate of %s: %w", t.Component, err)
	}
	// The leaf is captured once the chain is verified: with TLS 1.2 a
	// server that rejects our client certificate fails the handshake after
	// this point, and the certificate is still what we want to know.
	var served *x509.Certificate
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) > 0 {
			served = cs.PeerCertificates[0]
		}
		return nil
	}
	dialer := &tls.Dialer{NetDialer: &net.Dialer{Timeout: dialTimeout}, Config: cfg}
	conn, err := dialer.DialContext(ctx, "tcp", u.Host)
	if conn != nil {
		_ = conn.Close()
	}
	if served == nil {
		if err == nil {
			err = errors.New("no certificate")
		}
		return nil, fmt.Errorf("read served certificate of %s at %s: %w", t.Component, u.Host, err)
	}
	return served, nil
}
