package health

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/internal/config"
)

// status answers code with body on every path.
func status(code int, body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	})
}

func TestHTTPSCheck(t *testing.T) {
	p := newPKI(t)
	otherServer := p.other.issue(t, p.dir, "other-server", "127.0.0.1")
	wrongName := p.ca.issue(t, p.dir, "wrong-name", "10.9.9.9")
	otherClient := p.other.issue(t, p.dir, "other-client")
	readyzFailing := "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n[+]poststarthook/start-apiserver-admission-initializer ok\nreadyz check failed\n"
	onlyReadyzFails := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" && r.URL.Query().Has("verbose") {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, readyzFailing)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})

	tests := []struct {
		name       string
		url        string // the server, unless set
		handler    http.Handler
		serverCert pair        // default p.server
		clientCert *pair       // default p.client
		want       *ProbeError // nil: healthy
		contains   []string    // substrings of the error
	}{
		{name: "healthy", handler: healthz},
		{name: "refused", url: "closed", want: &ProbeError{Reason: ReasonRefused}, contains: []string{"connection refused"}},
		{name: "server cert from another CA", handler: healthz, serverCert: otherServer,
			want:     &ProbeError{Reason: ReasonTLS},
			contains: []string{`issued by "CN=other-ca" for 127.0.0.1`, "is not signed by the CA in " + p.ca.file, "other-server.crt"}},
		{name: "server cert for another address", handler: healthz, serverCert: wrongName,
			want:     &ProbeError{Reason: ReasonTLS},
			contains: []string{"for 10.9.9.9 is not valid for 127.0.0.1", p.ca.file}},
		{name: "client cert refused", handler: healthz, clientCert: &otherClient,
			want:     &ProbeError{Reason: ReasonTLS},
			contains: []string{"refused the TLS handshake", "other-client.crt"}},
		{name: "401", handler: status(401, "Unauthorized"), want: &ProbeError{Reason: ReasonCredentials, Status: 401},
			contains: []string{"/livez: HTTP 401", "client.crt"}},
		{name: "403", handler: status(403, `forbidden: User "x" cannot get path "/livez"`), want: &ProbeError{Reason: ReasonCredentials, Status: 403},
			contains: []string{"HTTP 403", `cannot get path`}},
		{name: "500 without checks", handler: status(500, "internal error\n"), want: &ProbeError{Reason: ReasonUnhealthy, Status: 500},
			contains: []string{"/livez: HTTP 500: internal error"}},
		{name: "readyz failing check", handler: onlyReadyzFails,
			want:     &ProbeError{Reason: ReasonUnhealthy, Status: 500, FailedChecks: []string{"etcd"}},
			contains: []string{"/readyz: HTTP 500: failing checks: etcd"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := tt.url
			if url == "closed" {
				url = closedURL(t)
			}
			if url == "" {
				serverCert := p.server
				if tt.serverCert.certFile != "" {
					serverCert = tt.serverCert
				}
				url = serveTLS(t, tt.handler, serverCert.tls, p.ca).URL
			}
			client := p.client
			if tt.clientCert != nil {
				client = *tt.clientCert
			}
			probe, err := NewProbe(Target{
				Component: config.NameAPIServer, Endpoints: []string{url}, Paths: []string{"/livez", "/readyz"},
				CAFile: p.ca.file, CertFile: client.certFile, KeyFile: client.keyFile, ServerCertFile: tt.serverCert.certFile,
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			err = probe.Check(ctx)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("want healthy, got %v", err)
				}
				return
			}
			var pe *ProbeError
			if !errors.As(err, &pe) {
				t.Fatalf("want a *ProbeError, got %T %v", err, err)
			}
			got := &ProbeError{Reason: pe.Reason, Status: pe.Status, FailedChecks: pe.FailedChecks}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%v\n(-want +got):\n%s", err, diff)
			}
			t.Log(err) // shown with -v, to review the wording
			for _, s := range tt.contains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error lacks %q:\n%v", s, err)
				}
			}
		})
	}
}

func TestNewProbeFileErrors(t *testing.T) {
	p := newPKI(t)
	tests := []struct {
		name   string
		target Target
		want   string
	}{
		{"missing CA", Target{Component: "c", Endpoints: []string{"https://x"}, Paths: []string{"/"}, CAFile: "/nope/ca.crt"}, `build c probe: read CA "/nope/ca.crt"`},
		{"CA without PEM", Target{Component: "c", Endpoints: []string{"https://x"}, Paths: []string{"/"}, CAFile: p.client.keyFile}, "no PEM certificate"},
		{"key does not match", Target{Component: "c", Endpoints: []string{"https://x"}, Paths: []string{"/"}, CAFile: p.ca.file, CertFile: p.client.certFile, KeyFile: p.server.keyFile}, "load client certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewProbe(tt.target, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("want an error containing %q, got %v", tt.want, err)
			}
		})
	}
}

// TestNewProbeHostPath: files are read where hostPath says, and errors
// name the host path.
func TestNewProbeHostPath(t *testing.T) {
	p := newPKI(t)
	srv := serveTLS(t, healthz, p.server.tls, p.ca)
	root := p.dir
	probe, err := NewProbe(Target{Component: "c", Endpoints: []string{srv.URL}, Paths: []string{"/healthz"},
		CAFile: "/cluster-ca.crt", CertFile: "/client.crt", KeyFile: "/client.key"}, func(path string) string { return root + path })
	if err != nil {
		t.Fatal(err)
	}
	if err := probe.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
}
