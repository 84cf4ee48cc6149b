package phases

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kubeboot/kubeboot/internal/workflow"
)

// SystemdDropIn is the drop-in of kubelet.service that a kubelet-start
// phase writes. Its name sorts after 10-kubeadm.conf, which the kubelet's
// packages ship, so its ExecStart is the one that counts.
const SystemdDropIn = "/etc/systemd/system/kubelet.service.d/20-kubeboot.conf"

// unitMark starts every systemd unit file and drop-in kubeboot writes (a
// KubeletUnit's Comment begins with it, less the "# "):
// reset, and a run that no longer wants one, remove only such a file.
const unitMark = "# Written by kubeboot"

// SystemdRunDir exists when systemd is the init system (sd_booted(3)).
const SystemdRunDir = "/run/systemd/system"

// KubeletPort is the kubelet's default port, kubeadm's Port-10250 check.
const KubeletPort = 10250

// KubeletUnit is how a workflow has systemd run the node's kubelet.
type KubeletUnit struct {
	// Comment is the drop-in's first line: who wrote it, and what for.
	Comment string
	// Args are the kubelet's flags.
	Args []string
	// StartFiles are the files, besides the drop-in, that the kubelet
	// reads only when it starts: one written in this run restarts it.
	StartFiles []string
	// Host and Port are where the kubelet listens; Host "" is every
	// address.
	Host string
	Port int
	// Then says what to do once the kubelet runs, in the warning of a
	// node without systemd, e.g. "then run ...".
	Then string
}

// KubeletAddress is where a kubelet whose kubelet.extraConfig is extra
// listens: its address (default: every address, "") and port (default
// KubeletPort).
func KubeletAddress(extra map[string]any) (string, int) {
	host, port := "", KubeletPort
	if a, ok := extra["address"].(string); ok {
		host = a
	}
	if p, ok := extra["port"].(float64); ok {
		port = int(p)
	}
	return host, port
}

// StartKubelet makes systemd run the kubelet of u: it writes
// SystemdDropIn, reloads systemd when the drop-in changed, and restarts
// kubelet.service when a file the kubelet reads at start changed in this
// run or the service is not active. Without systemd it says how to start
// the kubelet and goes on; beside a kubelet that kubelet.service does not
// run, it changes nothing.
func StartKubelet(ctx context.Context, s *workflow.Run, u KubeletUnit) error {
	if _, err := os.Stat(s.Files.HostPath(SystemdRunDir)); err != nil {
		s.Report.Warnf("this node does not run systemd (%s is missing): start the kubelet yourself, as %s, %s",
			SystemdRunDir, strings.Join(append([]string{"kubelet"}, u.Args...), " "), u.Then)
		return nil
	}
	out, err := s.System.Systemctl(ctx, "is-active", "kubelet")
	active := err == nil && strings.TrimSpace(string(out)) == "active"
	if !active && listening(u.Host, u.Port) {
		// Restarting kubelet.service would only make a second kubelet
		// fail on the port, or stop someone else's.
		s.Report.Warnf("a kubelet that kubelet.service does not run already listens on %s: left as it is, and no drop-in written; `--skip-phases kubelet-start` says so",
			net.JoinHostPort(u.Host, strconv.Itoa(u.Port)))
		return nil
	}
	kubelet, err := s.System.LookPath("kubelet")
	if err != nil {
		return fmt.Errorf("find the kubelet: %w: install it (its package also ships kubelet.service)", err)
	}
	if err := s.Files.WriteFile(SystemdDropIn, u.DropIn(kubelet), 0o644); err != nil {
		return err
	}
	return restartKubelet(ctx, s, u, active)
}

// restartKubelet reloads systemd when the drop-in was written in this run,
// and restarts kubelet.service unless it is active and nothing it reads at
// start was written.
func restartKubelet(ctx context.Context, s *workflow.Run, u KubeletUnit, active bool) error {
	written := s.Files.Changes().Written
	if slices.Contains(written, SystemdDropIn) {
		if err := systemctl(ctx, s.System, "daemon-reload"); err != nil {
			return err
		}
	}
	changed := slices.ContainsFunc(append([]string{SystemdDropIn}, u.StartFiles...),
		func(path string) bool { return slices.Contains(written, path) })
	if active && !changed {
		s.Report.Infof("kubelet.service is active, and nothing it reads at start changed: left running")
		return nil
	}
	if err := systemctl(ctx, s.System, "restart", "kubelet"); err != nil {
		return err
	}
	s.Report.Infof("restarted kubelet.service with %s", SystemdDropIn)
	if out, err := s.System.Systemctl(ctx, "is-enabled", "kubelet"); err != nil || strings.TrimSpace(string(out)) != "enabled" {
		s.Report.Warnf("kubelet.service is not enabled, so the kubelet will not start at boot: `systemctl enable kubelet`")
	}
	return nil
}

// listening says whether something listens on host:port, where the
// kubelet will.
func listening(host string, port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return errors.Is(err, syscall.EADDRINUSE)
	}
	_ = l.Close()
	return false
}

// systemctl runs systemctl with args through sys, and fails with its
// output.
func systemctl(ctx context.Context, sys workflow.System, args ...string) error {
	if out, err := sys.Systemctl(ctx, args...); err != nil {
		return fmt.Errorf("systemctl %s: %w: %s (see `journalctl -u kubelet`)", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// DropIn is the systemd drop-in that runs kubelet with u's flags in place
// of the unit's own command line.
func (u KubeletUnit) DropIn(kubelet string) []byte {
	words := []string{systemdQuote(kubelet)}
	for _, a := range u.Args {
		words = append(words, systemdQuote(a))
	}
	return []byte("# " + u.Comment + "\n" +
		"# The empty ExecStart= drops the command lines of kubelet.service and of the drop-ins before this one.\n" +
		"[Service]\nExecStart=\nExecStart=" + strings.Join(words, " ") + "\n")
}

// systemdQuote makes one word of an ExecStart= line: systemd expands %
// specifiers and $ variables, and splits at blanks.
func systemdQuote(word string) string {
	word = strings.NewReplacer("%", "%%", "$", "$$").Replace(word)
	if !strings.ContainsAny(word, " \t\"'\\;") {
		return word
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(word) + `"`
}

// StopKubelet undoes StartKubelet before the kubelet's files go: it stops
// kubelet.service when it is active, then removes SystemdDropIn when
// kubeboot wrote it (its first line says so) and reloads systemd. Without
// systemd, or beside a kubelet that kubelet.service does not run, it
// warns that the kubelet still runs, for whoever started it to stop. It returns the drop-in's node path when it removed it.
func StopKubelet(ctx context.Context, s *workflow.Run, host string, port int) (string, error) {
	_, err := os.Stat(s.Files.HostPath(SystemdRunDir))
	switch {
	case s.Options.DryRun || s.Options.Offline:
		// Nothing runs or reloads; the writer says what it would remove.
	case err != nil:
		if listening(host, port) {
			s.Report.Warnf("a kubelet still listens on %s, and this node does not run systemd: stop it yourself", net.JoinHostPort(host, strconv.Itoa(port)))
		}
		return "", nil
	default:
		if err := stopKubeletService(ctx, s, host, port); err != nil {
			return "", err
		}
	}
	data, err := s.Files.ReadFile(SystemdDropIn)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read %q: %w", SystemdDropIn, err)
	}
	if !strings.HasPrefix(string(data), unitMark) {
		s.Report.Warnf("left %s: kubeboot did not write it", SystemdDropIn)
		return "", nil
	}
	if err := s.Files.Remove(SystemdDropIn); err != nil {
		return "", err
	}
	if s.Options.DryRun || s.Options.Offline {
		return SystemdDropIn, nil
	}
	return SystemdDropIn, systemctl(ctx, s.System, "daemon-reload")
}

// kubeletPairLayout is the time in the name of a pair the kubelet's
// certificate store (k8s.io/client-go/util/certificate) writes:
// kubelet-client-2006-01-02-15-04-05.pem.
const kubeletPairLayout = "2006-01-02-15-04-05"

// isKubeletCertFile says whether name is one the kubelet gives a
// certificate or key in its certificate dir: a rotated client or serving
// pair, named by the time it was written, the current and updated links
// to one, and the self-signed serving pair of a kubelet without
// serverTLSBootstrap. Nothing else there is the kubelet's, however alike
// its name (kubelet-client-backup.pem is a user's).
func isKubeletCertFile(name string) bool {
	if name == "kubelet.crt" || name == "kubelet.key" {
		return true
	}
	for _, prefix := range []string{"kubelet-client-", "kubelet-server-"} {
		stamp, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		if stamp, ok = strings.CutSuffix(stamp, ".pem"); !ok {
			continue
		}
		if stamp == "current" || stamp == "updated" {
			return true
		}
		if t, err := time.Parse(kubeletPairLayout, stamp); err == nil && t.Format(kubeletPairLayout) == stamp {
			return true
		}
	}
	return false
}

// KubeletCerts lists, as node paths, the certificates and keys the kubelet
// wrote in certDir (isKubeletCertFile), which a reset removes with the
// kubelet's files: the cluster's CA issued the rotated ones, and a kubelet
// that kept them would present them to the next cluster this node joins
// or inits, whose API server refuses them. A missing certDir holds none.
func KubeletCerts(s *workflow.Run, certDir string) ([]string, error) {
	entries, err := os.ReadDir(s.Files.HostPath(certDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the kubelet's certificates in %s: %w", certDir, err)
	}
	var paths []string
	for _, e := range entries {
		if isKubeletCertFile(e.Name()) {
			paths = append(paths, filepath.Join(certDir, e.Name()))
		}
	}
	return paths, nil
}

// stopKubeletService stops kubelet.service when it is active, and warns
// about a kubelet on host:port that it does not run.
func stopKubeletService(ctx context.Context, s *workflow.Run, host string, port int) error {
	if out, err := s.System.Systemctl(ctx, "is-active", "kubelet"); err == nil && strings.TrimSpace(string(out)) == "active" {
		if err := systemctl(ctx, s.System, "stop", "kubelet"); err != nil {
			return err
		}
		s.Report.Infof("stopped kubelet.service")
	} else if listening(host, port) {
		s.Report.Warnf("a kubelet that kubelet.service does not run still listens on %s: stop it yourself", net.JoinHostPort(host, strconv.Itoa(port)))
	}
	return nil
}
