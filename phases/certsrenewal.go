package phases

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/kubeboot/kubeboot/internal/workflow"
)

// The units of the scheduled renewal (certificates.scheduledRenewal): a
// oneshot service that runs `kubeboot certs renew --due --restart`, and
// the timer that starts it every interval.
const (
	RenewalService = "/etc/systemd/system/kubeboot-certs-renew.service"
	RenewalTimer   = "/etc/systemd/system/kubeboot-certs-renew.timer"
	// renewalTimerUnit is the timer's unit name, for systemctl.
	renewalTimerUnit = "kubeboot-certs-renew.timer"
)

// CertsRenewal has the node's systemd renew what comes due on the
// schedule certificates.scheduledRenewal sets: it writes RenewalService
// and RenewalTimer, reloads systemd when they changed and enables and
// starts the timer (restarted when its interval changed). Without the
// setting it stops and removes a timer kubeboot wrote; without systemd it
// says what to run instead.
var CertsRenewal = workflow.Phase[*Node]{
	Name:     "certs-renewal",
	Short:    "Have systemd renew the certificates that come due, every certificates.scheduledRenewal.interval",
	LiveOnly: true,
	Run:      runCertsRenewal,
}

func runCertsRenewal(ctx context.Context, s *Node) error {
	r := s.Config.Certificates.ScheduledRenewal
	if r == nil {
		_, err := RemoveRenewalTimer(ctx, s.Run)
		return err
	}
	if _, err := os.Stat(s.Files.HostPath(SystemdRunDir)); err != nil {
		s.Report.Warnf("this node does not run systemd (%s is missing), which certificates.scheduledRenewal needs: run `%s` every %s yourself",
			SystemdRunDir, strings.Join(renewalCommand(s), " "), r.Interval.Duration)
		return nil
	}
	service, timer := renewalUnits(s, r.Interval.Duration)
	for path, data := range map[string][]byte{RenewalService: service, RenewalTimer: timer} {
		if err := s.Files.WriteFile(path, data, 0o644); err != nil {
			return err
		}
	}
	written := s.Files.Changes().Written
	timerChanged := slices.Contains(written, RenewalTimer)
	if timerChanged || slices.Contains(written, RenewalService) {
		if err := systemctl(ctx, s.System, "daemon-reload"); err != nil {
			return err
		}
	}
	if err := systemctl(ctx, s.System, "enable", "--now", renewalTimerUnit); err != nil {
		return err
	}
	if timerChanged {
		if err := systemctl(ctx, s.System, "restart", renewalTimerUnit); err != nil {
			return err
		}
	}
	s.Report.Infof("%s runs `%s` every %s", renewalTimerUnit, strings.Join(renewalCommand(s), " "), r.Interval.Duration)
	return nil
}

// renewalCommand is what the renewal service runs: the node's kubeboot,
// on the node's configuration file.
func renewalCommand(s *Node) []string {
	argv := []string{s.System.Kubeboot.Binary, "certs", "renew", "--due", "--restart"}
	if s.Options.ConfigFile != "" {
		argv = append(argv, "--config", s.Options.ConfigFile)
	}
	return argv
}

// renewalUnits are the service and the timer of the scheduled renewal.
// The timer's first start is interval after it starts, then interval
// after each run ends, so runs never overlap.
func renewalUnits(s *Node, interval time.Duration) (service, timer []byte) {
	words := make([]string, 0, len(renewalCommand(s)))
	for _, w := range renewalCommand(s) {
		words = append(words, systemdQuote(w))
	}
	service = fmt.Appendf(nil, `%s init: renews what is within certificates.renewBefore of its end (certificates.scheduledRenewal).
[Unit]
Description=kubeboot: renew the node's certificates that come due, and restart what uses them
After=kubelet.service

[Service]
Type=oneshot
ExecStart=%s
`, unitMark, strings.Join(words, " "))
	timer = fmt.Appendf(nil, `%s init: starts kubeboot-certs-renew.service every certificates.scheduledRenewal.interval.
[Unit]
Description=kubeboot: renew the node's certificates that come due, every %s

[Timer]
OnActiveSec=%d
OnUnitInactiveSec=%d

[Install]
WantedBy=timers.target
`, unitMark, interval, int(interval.Seconds()), int(interval.Seconds()))
	return service, timer
}

// RemoveRenewalTimer stops, disables and removes the scheduled renewal's
// units when kubeboot wrote them (their first line says so), and returns
// the node paths it removed: a configuration without
// certificates.scheduledRenewal, and reset, take them away.
func RemoveRenewalTimer(ctx context.Context, s *workflow.Run) ([]string, error) {
	var removed []string
	for _, path := range []string{RenewalTimer, RenewalService} {
		data, err := s.Files.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return removed, fmt.Errorf("read %q: %w", path, err)
		}
		if !strings.HasPrefix(string(data), unitMark) {
			s.Report.Warnf("left %s: kubeboot did not write it", path)
			continue
		}
		if path == RenewalTimer && !s.Options.DryRun && !s.Options.Offline {
			if _, err := os.Stat(s.Files.HostPath(SystemdRunDir)); err == nil {
				if err := systemctl(ctx, s.System, "disable", "--now", renewalTimerUnit); err != nil {
					return removed, err
				}
			}
		}
		if err := s.Files.Remove(path); err != nil {
			return removed, err
		}
		removed = append(removed, path)
	}
	if len(removed) > 0 && !s.Options.DryRun && !s.Options.Offline {
		if _, err := os.Stat(s.Files.HostPath(SystemdRunDir)); err == nil {
			return removed, systemctl(ctx, s.System, "daemon-reload")
		}
	}
	return removed, nil
}
