package clusterupgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/kubeboot/kubeboot/internal/output"
)

// OnNode is a node's own part of `upgrade cluster`, which the upgrade pod
// runs inside the node's root (EnterRoot): the kubelet's install command,
// then the node's kubeboot upgrade, each as a transient systemd unit, so
// that the kubelet's restart, which stops nothing outside its pods, does
// not stop it either.
type OnNode struct {
	// Config is the node's file, as kubeboot's bootstrap unit reads it.
	Config string
	// Version is the release the node moves to.
	Version string
	// Apply says the node is the first control-plane node, which runs
	// `upgrade apply`; the others run `upgrade node`.
	Apply bool
	// ControlPlane says the node runs the control plane: its file is
	// moved to Version (--kubernetes-version).
	ControlPlane bool
	// Install is kubelet.installCommand, run first; empty: none.
	Install []string
}

// Host is what OnNode runs on the node: systemd's tools and the node's
// kubeboot, and the directory of the units' output, all paths in the
// node's root.
type Host struct {
	// SystemdRun and Systemctl are systemd's tools, and Booted the
	// directory that is there while systemd runs the node.
	SystemdRun, Systemctl, Booted string
	// Kubeboot is the node's kubeboot binary.
	Kubeboot string
	// LogDir holds each unit's output, which OnNode then prints.
	LogDir string
	// Poll is how often a unit an earlier run started is looked at.
	Poll time.Duration
}

// NodeHost is Host on a node: systemd's tools in /usr/bin, and the units'
// output in /run/kubeboot.
func NodeHost(kubeboot string) Host {
	return Host{SystemdRun: "/usr/bin/systemd-run", Systemctl: "/usr/bin/systemctl", Booted: "/run/systemd/system", Kubeboot: kubeboot, LogDir: "/run/kubeboot", Poll: 2 * time.Second}
}

// Unit names of the node's upgrade.
const (
	installUnit = "kubeboot-upgrade-kubelet"
	upgradeUnit = "kubeboot-upgrade-node"
)

// EnterRoot makes root the process's root directory, as the upgrade pod
// sees the node's root under it; "/" changes nothing.
func EnterRoot(root string) error {
	if root == "/" {
		return nil
	}
	if err := syscall.Chroot(root); err != nil {
		return fmt.Errorf("enter the node's root %s (the upgrade pod runs privileged, with the node's / mounted there): %w", root, err)
	}
	return os.Chdir("/")
}

// Run upgrades the node: the install command with KUBERNETES_VERSION in its
// environment, then `kubeboot upgrade apply|node`, printing each one's
// output to out. A node kubeboot did not bring up, or one without
// systemd, is refused before anything runs.
func (o OnNode) Run(ctx context.Context, h Host, out io.Writer) error {
	if _, err := os.Stat(o.Config); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("this node has no %s: kubeboot did not bring it up (a node joined with `kubeadm join`?); upgrade it with `kubeadm upgrade node` on it, or name the file every node has with upgrade cluster --node-config", o.Config)
	}
	for _, path := range []string{h.SystemdRun, h.Systemctl, h.Booted} {
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("this node has no systemd (%w): upgrade cluster runs the node's upgrade as a transient unit; run `kubeboot upgrade node` on it by hand", err)
		}
	}
	if len(o.Install) > 0 {
		if err := h.unit(ctx, installUnit, []string{"KUBERNETES_VERSION=" + o.Version}, o.Install, out); err != nil {
			return fmt.Errorf("the kubelet's install command (kubelet.installCommand): %w", err)
		}
	}
	verb := "node"
	if o.Apply {
		verb = "apply"
	}
	argv := []string{h.Kubeboot, "upgrade", verb, "--config", o.Config, "-o", "json"}
	if o.ControlPlane {
		argv = append(argv, "--kubernetes-version", o.Version)
	}
	if err := h.unit(ctx, upgradeUnit, nil, argv, out); err != nil {
		return fmt.Errorf("kubeboot upgrade %s: %w", verb, err)
	}
	return nil
}

// unit runs argv as the transient unit name with env, once any run of it an
// earlier pod started has ended, and prints its output to out.
func (h Host) unit(ctx context.Context, name string, env, argv []string, out io.Writer) error {
	if err := h.waitInactive(ctx, name, out); err != nil {
		return err
	}
	if err := os.MkdirAll(h.LogDir, 0o700); err != nil {
		return err
	}
	log := filepath.Join(h.LogDir, name+".log")
	args := []string{"--unit=" + name, "--wait", "--collect", "--quiet", "--service-type=exec",
		"--property=StandardOutput=truncate:" + log, "--property=StandardError=inherit"}
	for _, e := range env {
		args = append(args, "--setenv="+e)
	}
	args = append(append(args, "--"), argv...)
	// Not bound to ctx: the unit goes on when this process is stopped,
	// and a later run waits for it.
	runErr := exec.Command(h.SystemdRun, args...).Run()
	logged, err := os.ReadFile(log)
	if err != nil && runErr == nil {
		return fmt.Errorf("read the unit's output: %w", err)
	}
	_, _ = out.Write(logged)
	if runErr != nil {
		return fmt.Errorf("%s failed (%w); its last lines:\n%s", name, runErr, output.LastLines(string(logged), 15))
	}
	return nil
}

// waitInactive waits until the unit name is not running: an earlier
// upgrade pod, stopped, may have left it running.
func (h Host) waitInactive(ctx context.Context, name string, out io.Writer) error {
	said := false
	for {
		state, err := exec.Command(h.Systemctl, "show", "--property=ActiveState", "--value", name+".service").Output()
		if err != nil {
			return fmt.Errorf("ask systemd about %s: %w", name, err)
		}
		switch strings.TrimSpace(string(state)) {
		case "active", "activating", "deactivating", "reloading":
		default:
			return nil
		}
		if !said {
			_, _ = fmt.Fprintf(out, "waiting for %s, which an earlier run started, to end\n", name)
			said = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(h.Poll):
		}
	}
}
