package phases_test

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

// renewalNode is a control-plane node under root whose configuration
// file is /etc/kubeboot/node.yaml and, unless interval is zero, sets
// certificates.scheduledRenewal; out collects the progress.
func renewalNode(t *testing.T, root string, interval time.Duration) (*phases.Node, *bytes.Buffer) {
	t.Helper()
	s := phasestest.NewNode(t, root, config.DefaultKubernetesVersion)
	s.Options.ConfigFile = "/etc/kubeboot/node.yaml"
	if interval > 0 {
		s.Config.Certificates.ScheduledRenewal = &config.ScheduledRenewal{Interval: metav1.Duration{Duration: interval}}
	}
	var out bytes.Buffer
	s.Report = output.NewReporter(&out, false)
	return s, &out
}

// TestCertsRenewal: with certificates.scheduledRenewal, certs-renewal
// writes a service running `certs renew --due --restart` on the node's
// file and a timer of the interval, and enables the timer; a second run
// changes nothing; a new interval restarts the timer; without the setting
// the units go; without systemd it says what to run.
func TestCertsRenewal(t *testing.T) {
	state := "active"
	sys, calls := phasestest.FakeSystemd(&state)
	root := t.TempDir()

	s, out := renewalNode(t, root, 12*time.Hour)
	s.System = sys
	if err := phasestest.Run(s, phases.CertsRenewal); err != nil {
		t.Fatal(err)
	}
	if len(*calls) > 0 || len(s.Files.Changes().Written) > 0 ||
		!strings.Contains(out.String(), "run `/usr/bin/kubeboot certs renew --due --restart --config /etc/kubeboot/node.yaml` every 12h0m0s yourself") {
		t.Errorf("without systemd: ran %v, wrote %v\n%s", *calls, s.Files.Changes().Written, out)
	}

	if err := os.MkdirAll(s.Files.HostPath(phases.SystemdRunDir), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(interval time.Duration) *phases.Node {
		t.Helper()
		*calls = nil
		s, _ := renewalNode(t, root, interval)
		s.System = sys
		if err := phasestest.Run(s, phases.CertsRenewal); err != nil {
			t.Fatal(err)
		}
		return s
	}
	run(12 * time.Hour)
	if diff := cmp.Diff([]string{"daemon-reload", "enable --now kubeboot-certs-renew.timer", "restart kubeboot-certs-renew.timer"}, *calls); diff != "" {
		t.Errorf("first run's systemctl (-want +got):\n%s", diff)
	}
	service := string(phasestest.HostFile(t, s, phases.RenewalService))
	timer := string(phasestest.HostFile(t, s, phases.RenewalTimer))
	if !strings.Contains(service, "\nExecStart=/usr/bin/kubeboot certs renew --due --restart --config /etc/kubeboot/node.yaml\n") || !strings.Contains(service, "Type=oneshot") {
		t.Errorf("the service:\n%s", service)
	}
	if !strings.Contains(timer, "\nOnActiveSec=43200\nOnUnitInactiveSec=43200\n") || !strings.Contains(timer, "WantedBy=timers.target") {
		t.Errorf("the timer:\n%s", timer)
	}

	if again := run(12 * time.Hour); len(again.Files.Changes().Written) > 0 || !cmp.Equal(*calls, []string{"enable --now kubeboot-certs-renew.timer"}) {
		t.Errorf("a second run wrote %v and ran %v", again.Files.Changes().Written, *calls)
	}
	run(time.Hour)
	if diff := cmp.Diff([]string{"daemon-reload", "enable --now kubeboot-certs-renew.timer", "restart kubeboot-certs-renew.timer"}, *calls); diff != "" {
		t.Errorf("a new interval's systemctl (-want +got):\n%s", diff)
	}

	run(0)
	if diff := cmp.Diff([]string{"disable --now kubeboot-certs-renew.timer", "daemon-reload"}, *calls); diff != "" {
		t.Errorf("without the setting, systemctl (-want +got):\n%s", diff)
	}
	for _, path := range []string{phases.RenewalService, phases.RenewalTimer} {
		if _, err := os.Stat(s.Files.HostPath(path)); !os.IsNotExist(err) {
			t.Errorf("%s is left without the setting: %v", path, err)
		}
	}
	// A unit of the same name that kubeboot did not write is left.
	if err := os.WriteFile(s.Files.HostPath(phases.RenewalTimer), []byte("[Timer]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if run(0); len(*calls) > 0 {
		t.Errorf("a timer kubeboot did not write: ran %v", *calls)
	}
	if _, err := os.Stat(s.Files.HostPath(phases.RenewalTimer)); err != nil {
		t.Errorf("a timer kubeboot did not write was removed: %v", err)
	}
}

// TestDue: with every leaf within renewBefore, each of kubeboot's leaves
// and embedded kubeconfig certificates is due, the CAs are not; with the
// default window none is, and the next comes due renewBefore before the
// first to end.
func TestDue(t *testing.T) {
	root := t.TempDir()
	s, _ := renewalNode(t, root, 0)
	if err := phasestest.Run(s, phases.Certs, phases.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	due, next, err := phases.Due(s, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 0 || next.IsZero() || next.Before(now.Add(config.DefaultLeafValidity-config.DefaultRenewBefore-time.Hour)) || next.After(now.Add(config.DefaultLeafValidity-config.DefaultRenewBefore)) {
		t.Errorf("nothing near its end: due %v, next end %s", due, next)
	}

	s, _ = renewalNode(t, root, 0)
	s.Config.Certificates.LeafValidity.Duration = 2 * config.DefaultLeafValidity
	s.Config.Certificates.RenewBefore.Duration = config.DefaultLeafValidity + time.Hour
	due, next, err = phases.Due(s, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{config.CertAPIServer, config.CertEtcdServer, config.KubeconfigAdmin, config.KubeconfigScheduler} {
		if !slices.Contains(due, want) {
			t.Errorf("%s is not due: %v", want, due)
		}
	}
	for _, ca := range []string{config.CertCA, config.CertEtcdCA, config.CertFrontProxyCA} {
		if slices.Contains(due, ca) {
			t.Errorf("the CA %s is due: %v", ca, due)
		}
	}
	if !next.IsZero() {
		t.Errorf("every leaf is due, yet the next comes due at %s", next)
	}
}
