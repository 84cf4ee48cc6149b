package health

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestServedCertificate(t *testing.T) {
	p := newPKI(t)
	tests := []struct {
		name       string
		clientAuth bool
		maxVersion uint16
		caFile     string
		wantErr    string
	}{
		{name: "server certificate", caFile: p.ca.file},
		// etcd asks for a client certificate; without one a TLS 1.2
		// handshake fails after the server's certificate is verified.
		{name: "client certificate required, TLS 1.2", clientAuth: true, maxVersion: tls.VersionTLS12, caFile: p.ca.file},
		{name: "client certificate required, TLS 1.3", clientAuth: true, caFile: p.ca.file},
		{name: "unknown CA", caFile: p.other.file, wantErr: "certificate signed by unknown authority"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(http.NotFoundHandler())
			srv.TLS = &tls.Config{Certificates: []tls.Certificate{p.server.tls}, MaxVersion: tt.maxVersion}
			if tt.clientAuth {
				srv.TLS.ClientCAs, srv.TLS.ClientAuth = p.other.pool(), tls.RequireAndVerifyClientCert
			}
			srv.Config.ErrorLog = log.New(io.Discard, "", 0)
			srv.StartTLS()
			defer srv.Close()
			served, err := ServedCertificate(context.Background(), Target{Component: "etcd", Endpoints: []string{srv.URL}, CAFile: tt.caFile}, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("want an error with %q, got %v", tt.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(served.Raw, p.server.tls.Certificate[0]) {
				t.Error("ServedCertificate returned another certificate than the server's")
			}
		})
	}
}
