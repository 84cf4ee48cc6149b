package phases

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/health"
)

// fakeKubelet runs a stand-in scheduler on addr while its manifest is in
// the manifest dir, and stops it while the manifest is out, as the kubelet
// does with a static pod. Each start loads the serving certificate, unless
// stale is set: then it keeps serving the first one it loaded.
type fakeKubelet struct {
	mu     sync.Mutex
	starts int
}

func (k *fakeKubelet) started() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.starts
}

func (k *fakeKubelet) run(ctx context.Context, t *testing.T, s *State, addr string, stale bool) {
	c := s.Config
	manifest := s.Files.HostPath(c.ManifestPath(config.NameScheduler))
	var srv *http.Server
	var first *tls.Certificate
	for ctx.Err() == nil {
		data, err := os.ReadFile(manifest)
		switch {
		case err == nil && srv == nil && strings.Contains(string(data), "bogus-flag"):
			// A component that exits at once never listens.
		case err == nil && srv == nil:
			cert, err := tls.LoadX509KeyPair(s.Files.HostPath(c.CertPath(config.CertScheduler)), s.Files.HostPath(c.KeyPath(config.CertScheduler)))
			if err != nil {
				t.Error(err)
				return
			}
			if first == nil || !stale {
				first = &cert
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				continue // the old socket is still closing
			}
			srv = &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), ErrorLog: log.New(io.Discard, "", 0),
				TLSConfig: &tls.Config{Certificates: []tls.Certificate{*first}}}
			go func(srv *http.Server) { _ = srv.ServeTLS(ln, "", "") }(srv)
			k.mu.Lock()
			k.starts++
			k.mu.Unlock()
		case errors.Is(err, os.ErrNotExist) && srv != nil:
			_ = srv.Close()
			srv = nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	if srv != nil {
		_ = srv.Close()
	}
}

func TestRestartOne(t *testing.T) {
	for _, tt := range []struct {
		name    string
		stale   bool
		wantErr string
	}{
		{name: "new instance serves the renewed certificate"},
		{name: "new instance serves a stale certificate", stale: true, wantErr: "not the one in"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := initialised(t)
			s.Options.Offline = false
			s.Config.Timeouts.ControlPlane.Duration = 10 * time.Second
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			_ = ln.Close()
			host, port, _ := net.SplitHostPort(addr)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			k := &fakeKubelet{}
			done := make(chan struct{})
			go func() { k.run(ctx, t, s, addr, tt.stale); close(done) }()
			defer func() { cancel(); <-done }()
			for k.started() == 0 {
				time.Sleep(10 * time.Millisecond)
			}

			manifest := s.Files.HostPath(s.Config.ManifestPath(config.NameScheduler))
			before, err := os.ReadFile(manifest)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := RenewCerts(s, []string{config.CertScheduler}, false); err != nil {
				t.Fatal(err)
			}
			target := health.Target{Component: config.NameScheduler, Endpoints: []string{"https://" + addr}, Paths: []string{"/livez"},
				CAFile: s.Config.CertPath(config.CertCA), ServerCertFile: s.Config.CertPath(config.CertScheduler)}
			err = restartOne(ctx, s, target, []listener{{config.NameScheduler, host, port}})

			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("want an error with %q, got %v", tt.wantErr, err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if after, _ := os.ReadFile(manifest); string(after) != string(before) {
				t.Error("the manifest is not back byte for byte")
			}
			if starts := k.started(); starts != 2 {
				t.Errorf("the component started %d times, want 2 (before and after the restart)", starts)
			}
			_, err = os.Stat(s.Files.HostPath(backupsDir(s.Config) + "/kube-scheduler.yaml"))
			if backupKept := err == nil; backupKept != (tt.wantErr != "") {
				t.Errorf("backup kept: %v; it stays only after a failed restart", backupKept)
			}
		})
	}
}
