package join

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/phases"
)

// SystemdDropIn is the drop-in of kubelet.service that kubelet-start
// writes. Its name sorts after 10-kubeadm.conf, which the kubelet's
// packages ship, so its ExecStart is the one that counts.
const SystemdDropIn = "/etc/systemd/system/kubelet.service.d/20-kubeboot.conf"

// systemdRunDir exists when systemd is the init system (sd_booted(3)).
const systemdRunDir = "/run/systemd/system"

// The processes kubelet-start runs, replaced by tests.
var (
	systemctl = func(ctx context.Context, args ...string) ([]byte, error) {
		return exec.CommandContext(ctx, "systemctl", args...).CombinedOutput()
	}
	lookPath = exec.LookPath
)

// KubeletStart makes systemd run the kubelet with the join's flags: it
// writes SystemdDropIn, and restarts kubelet.service when a file the
// kubelet reads at start changed in this run or the service is not
// active. Without systemd it says how to start the kubelet and goes on;
// beside a kubelet that kubelet.service does not run, it changes nothing.
// `--skip-phases kubelet-start` leaves the kubelet to whoever starts it
// otherwise, such as the lab.
var KubeletStart = phases.Phase{
	Name:     "kubelet-start",
	Short:    "Start the kubelet through systemd with a drop-in holding the join's flags (without systemd: say how to start it)",
	LiveOnly: true,
	Run:      runKubeletStart,
}

// KubeletArgs are the kubelet's flags on a joining worker: its TLS
// bootstrap credential, the kubeconfig the bootstrap writes, its
// configuration, its node name (always given, so that the Node the join
// checks and waits for is the one the kubelet registers) and, when set,
// its node IP.
func KubeletArgs(w *config.WorkerConfiguration) []string {
	args := []string{
		"--bootstrap-kubeconfig=" + w.KubeconfigPath(config.KubeconfigBootstrapKubelet),
		"--kubeconfig=" + w.KubeconfigPath(config.KubeconfigKubelet),
		"--config=" + w.Kubelet.ConfigFile,
		"--hostname-override=" + w.Node.Name,
	}
	if w.Node.Address != "" {
		args = append(args, "--node-ip="+w.Node.Address)
	}
	return args
}

func runKubeletStart(ctx context.Context, s *phases.State) error {
	w, err := worker(s)
	if err != nil {
		return err
	}
	args := KubeletArgs(w)
	if _, err := os.Stat(s.Files.HostPath(systemdRunDir)); err != nil {
		s.Report.Warnf("this node does not run systemd (%s is missing): start the kubelet yourself, as %s, then run `kubeboot join phase kubelet-wait-bootstrap` with this join's flags",
			systemdRunDir, strings.Join(append([]string{"kubelet"}, args...), " "))
		return nil
	}
	out, err := systemctl(ctx, "is-active", "kubelet")
	active := err == nil && strings.TrimSpace(string(out)) == "active"
	if host, port := kubeletAddress(w); !active && listening(host, port) {
		// Restarting kubelet.service would only make a second kubelet
		// fail on the port, or stop someone else's.
		s.Report.Warnf("a kubelet that kubelet.service does not run already listens on %s: left as it is, and no drop-in written; `--skip-phases kubelet-start` says so",
			net.JoinHostPort(host, strconv.Itoa(port)))
		return nil
	}
	kubelet, err := lookPath("kubelet")
	if err != nil {
		return fmt.Errorf("find the kubelet: %w: install it (its package also ships kubelet.service)", err)
	}
	if err := s.Files.WriteFile(SystemdDropIn, DropIn(kubelet, args), 0o644); err != nil {
		return err
	}
	written := s.Files.Changes().Written
	if slices.Contains(written, SystemdDropIn) {
		if err := run(ctx, "daemon-reload"); err != nil {
			return err
		}
	}
	// The kubelet reads these only when it starts.
	changed := slices.ContainsFunc([]string{SystemdDropIn, w.Kubelet.ConfigFile, w.CAPath(), w.KubeconfigPath(config.KubeconfigBootstrapKubelet)},
		func(path string) bool { return slices.Contains(written, path) })
	if active && !changed {
		s.Report.Infof("kubelet.service is active, and nothing it reads at start changed: left running")
		return nil
	}
	if err := run(ctx, "restart", "kubelet"); err != nil {
		return err
	}
	s.Report.Infof("restarted kubelet.service with %s", SystemdDropIn)
	if out, err := systemctl(ctx, "is-enabled", "kubelet"); err != nil || strings.TrimSpace(string(out)) != "enabled" {
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

// run runs systemctl with args, and fails with its output.
func run(ctx context.Context, args ...string) error {
	if out, err := systemctl(ctx, args...); err != nil {
		return fmt.Errorf("systemctl %s: %w: %s (see `journalctl -u kubelet`)", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// DropIn is the systemd drop-in that runs kubelet with args in place of
// the unit's own command line.
func DropIn(kubelet string, args []string) []byte {
	words := []string{systemdQuote(kubelet)}
	for _, a := range args {
		words = append(words, systemdQuote(a))
	}
	return []byte("# Written by kubeboot join: this node's kubelet joins its cluster with these flags.\n" +
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
