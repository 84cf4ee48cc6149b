package controlplane

import (
	"bytes"
	"context"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/health"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/testsupport"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
	"github.com/kubeboot/kubeboot/pki"
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

// TestRenewedRestarts: a converging run with Options.Renew that renews
// every leaf (all within renewBefore) restarts each component that uses
// one, in start order, but not one whose manifest the run rewrote, which
// the kubelet restarts itself, and last the kubelet, for its serving
// certificate.
func TestRenewedRestarts(t *testing.T) {
	// again converges a node initialised anew, as edit says.
	again := func(edit func(*config.ClusterConfiguration)) *phases.Node {
		s := phasestest.NewNode(t, initialised(t).Files.HostPath("/"), "v1.36.3")
		s.Options.Offline, s.Options.Renew = true, true
		// Every leaf, valid for a year, is within the window now.
		s.Config.Certificates.LeafValidity.Duration = 2 * 365 * 24 * time.Hour
		s.Config.Certificates.RenewBefore.Duration = 366 * 24 * time.Hour
		edit(s.Config)
		if _, err := renderNode.Run(context.Background(), s, nil); err != nil {
			t.Fatal(err)
		}
		return s
	}

	s := again(func(*config.ClusterConfiguration) {})
	if !slices.Contains(s.Renewed, config.CertAPIServer) || !slices.Contains(s.Renewed, config.KubeconfigScheduler) {
		t.Fatalf("renewed %v, want every leaf", s.Renewed)
	}
	if got, want := renewedRestarts(s), append(slices.Clone(config.ComponentNames), pki.Kubelet); !slices.Equal(got, want) {
		t.Errorf("restarts %v, want %v", got, want)
	}

	s = again(func(c *config.ClusterConfiguration) { c.Scheduler.ExtraArgs = []config.Arg{{Name: "v", Value: "3"}} })
	if got, want := renewedRestarts(s), []string{config.NameEtcd, config.NameAPIServer, config.NameControllerManager, pki.Kubelet}; !slices.Equal(got, want) {
		t.Errorf("with the scheduler's manifest rewritten: restarts %v, want %v", got, want)
	}

	s = again(func(c *config.ClusterConfiguration) { c.Certificates.RenewBefore.Duration = config.DefaultRenewBefore })
	if len(s.Renewed) != 0 || len(renewedRestarts(s)) != 0 {
		t.Errorf("nothing due: renewed %v, restarts %v", s.Renewed, renewedRestarts(s))
	}
}

// TestRestartKubelet: the kubelet, whose kubeconfig or serving
// certificate a renewal replaced, is restarted through systemd; without
// systemd the operator is told to; with kubeboot's serving certificate it
// must then serve the one on disk.
func TestRestartKubelet(t *testing.T) {
	s := initialisedWith(t, func(c *config.ClusterConfiguration) {
		off := false
		c.Security.VerifyKubeletServingCerts = &off
	})
	s.Options.Offline = false
	state := "active"
	sys, calls := phasestest.FakeSystemd(&state)
	s.System = sys
	var out bytes.Buffer
	s.Report = output.NewReporter(&out, false)
	if err := restartComponents(context.Background(), s, []string{pki.Kubelet}); err != nil {
		t.Fatal(err)
	}
	if len(*calls) > 0 || !strings.Contains(out.String(), "restart the kubelet yourself") {
		t.Errorf("without systemd: ran %v\n%s", *calls, out.String())
	}

	if err := os.MkdirAll(s.Files.HostPath(phases.SystemdRunDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := restartComponents(context.Background(), s, []string{pki.Kubelet}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(*calls, []string{"restart kubelet"}) || !strings.Contains(out.String(), "restarted kubelet.service") {
		t.Errorf("with systemd: ran %v\n%s", *calls, out.String())
	}

	// With its serving certificate kubeboot's, a kubelet that serves none
	// fails the restart, within timeouts.controlPlane.
	s.Config.Security.VerifyKubeletServingCerts = nil
	s.Config.Timeouts.ControlPlane.Duration = 2 * time.Second
	s.Config.Kubelet.ExtraConfig = map[string]any{"address": "127.0.0.1", "port": float64(testsupport.FreePort(t))}
	err := restartComponents(context.Background(), s, []string{pki.Kubelet})
	if err == nil || !strings.Contains(err.Error(), "does not serve "+s.Config.CertPath(config.CertKubeletServer)) {
		t.Errorf("a kubelet serving nothing: %v", err)
	}
}

// TestRestartApproverBeforeKubelet: the CSR approver restarts before the
// kubelet, whatever order the names come in, so that a kubelet that has
// just started never sees the approver's manifest go: an approver whose
// manifest is missing fails the restart before the kubelet is touched.
func TestRestartApproverBeforeKubelet(t *testing.T) {
	s := initialisedWith(t, func(c *config.ClusterConfiguration) {
		on, off := true, false
		c.CSRApprover.Enabled, c.Security.VerifyKubeletServingCerts = &on, &off
	})
	s.Options.Offline = false
	state := "active"
	sys, calls := phasestest.FakeSystemd(&state)
	s.System = sys
	if err := os.MkdirAll(s.Files.HostPath(phases.SystemdRunDir), 0o755); err != nil {
		t.Fatal(err)
	}
	manifest := s.Config.ManifestPath(config.NameCSRApprover)
	if err := os.Remove(s.Files.HostPath(manifest)); err != nil {
		t.Fatal(err)
	}
	err := restartComponents(context.Background(), s, []string{pki.Kubelet, config.NameCSRApprover})
	if err == nil || !strings.Contains(err.Error(), manifest) {
		t.Errorf("restart with the approver's manifest missing: %v", err)
	}
	if len(*calls) > 0 {
		t.Errorf("the kubelet was restarted before the approver: ran %v", *calls)
	}
}

// TestStaleRestarts: a component whose process started before a
// certificate it loads was renewed is stale, whatever run renewed it, and
// is not once restarted; one started after is not.
func TestStaleRestarts(t *testing.T) {
	s := initialised(t)
	s.Options.Offline = false
	s.Config.Timeouts.ControlPlane.Duration = 10 * time.Second
	k := &fakeKubelet{addr: freeAddr(t)}
	k.start(t, s)
	host, port, _ := net.SplitHostPort(k.addr)
	target := schedulerTarget(s, k.addr)
	// Later runs on the node: the one that wrote the manifests is over.
	later := func() *phases.Node {
		n := phasestest.NewNode(t, s.Files.HostPath("/"), "v1.36.3")
		n.Options.Offline = false
		return n
	}

	if stale, err := staleOf(later(), []health.Target{target}); err != nil || len(stale) != 0 {
		t.Fatalf("a scheduler started after its files: stale %v, %v", stale, err)
	}
	if _, err := phases.RenewCerts(later(), []string{config.CertScheduler}, false); err != nil {
		t.Fatal(err)
	}
	if stale, err := staleOf(later(), []health.Target{target}); err != nil || !slices.Equal(stale, []string{config.NameScheduler}) {
		t.Fatalf("a scheduler started before its certificate was renewed: stale %v, %v; want it", stale, err)
	}
	if err := restartOne(context.Background(), s, target, []phases.Listener{{Component: config.NameScheduler, Host: host, Port: port}}); err != nil {
		t.Fatal(err)
	}
	if stale, err := staleOf(later(), []health.Target{target}); err != nil || len(stale) != 0 {
		t.Errorf("the restarted scheduler: stale %v, %v", stale, err)
	}
}
