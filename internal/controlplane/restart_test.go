package controlplane

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/health"
	"github.com/kubeboot/kubeboot/phases"
)

// schedulerTarget is how the stand-in scheduler on addr is checked.
func schedulerTarget(s *phases.Node, addr string) health.Target {
	return health.Target{Component: config.NameScheduler, Endpoints: []string{"https://" + addr}, Paths: []string{"/livez"},
		CAFile: s.Config.CertPath(config.CertCA), ServerCertFile: s.Config.CertPath(config.CertScheduler)}
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
			k := &fakeKubelet{addr: freeAddr(t), stale: tt.stale}
			k.start(t, s)
			host, port, _ := net.SplitHostPort(k.addr)

			manifest := s.Files.HostPath(s.Config.ManifestPath(config.NameScheduler))
			before, err := os.ReadFile(manifest)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := phases.RenewCerts(s, []string{config.CertScheduler}, false); err != nil {
				t.Fatal(err)
			}
			err = restartOne(context.Background(), s, schedulerTarget(s, k.addr), []phases.Listener{{Component: config.NameScheduler, Host: host, Port: port}})

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
			_, err = os.Stat(s.Files.HostPath(phases.BackupsDir(s.Config) + "/kube-scheduler.yaml"))
			if backupKept := err == nil; backupKept != (tt.wantErr != "") {
				t.Errorf("backup kept: %v; it stays only after a failed restart", backupKept)
			}
		})
	}
}
