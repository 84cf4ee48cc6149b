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
	// KubeadmIgnorePreflightErrors is what `kubeadm upgrade node`, on a
	// worker kubeadm joined, is told to ignore (--ignore-preflight-errors).
	KubeadmIgnorePreflightErrors string
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
	// Kubeadm is kubeadm's binary, and KubeadmJoined the file `kubeadm
	// join` leaves on a worker: the kubelet flags kubeadm's drop-in reads.
	Kubeadm, KubeadmJoined string
	// LogDir holds each unit's output, which OnNode then prints.
	LogDir string
	// Poll is how often a unit an earlier run started is looked at.
	Poll time.Duration
}

// NodeHost is Host on a node: systemd's tools in /usr/bin, and the units'
// output in /run/kubeboot.
func NodeHost(kubeboot string) Host {
	return Host{SystemdRun: "/usr/bin/systemd-run", Systemctl: "/usr/bin/systemctl", Booted: "/run/systemd/system", Kubeboot: kubeboot,
		Kubeadm: "/usr/bin/kubeadm", KubeadmJoined: "/var/lib/kubelet/kubeadm-flags.env", LogDir: "/run/kubeboot", Poll: 2 * time.Second}
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
// output to out. A worker without the node's file, but with kubeadm and
// the kubelet flags `kubeadm join` writes, was joined by kubeadm: it runs
// `kubeadm upgrade node` instead, then restarts the kubelet, as kubeadm's
// documentation says. Any other node without the file, or one without
// systemd, is refused before anything runs.
func (o OnNode) Run(ctx context.Context, h Host, out io.Writer) error {
	argv, what, err := o.upgrade(h)
	if err != nil {
		return err
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
	if err := h.unit(ctx, upgradeUnit, nil, argv, out); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if argv[0] != h.Kubeadm {
		return nil
	}
	for _, args := range [][]string{{"daemon-reload"}, {"restart", "kubelet"}} {
		if msg, err := exec.CommandContext(ctx, h.Systemctl, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("systemctl %s, after kubeadm upgrade node: %w: %s", strings.Join(args, " "), err, msg)
		}
	}
	_, _ = fmt.Fprintln(out, "restarted kubelet.service")
	return nil
}

// upgrade is the node's upgrade command and what to call it: kubeboot's
// on a node it brought up, kubeadm's on a worker kubeadm joined.
func (o OnNode) upgrade(h Host) (argv []string, what string, err error) {
	if _, err := os.Stat(o.Config); !errors.Is(err, fs.ErrNotExist) {
		verb := "node"
		if o.Apply {
			verb = "apply"
		}
		argv := []string{h.Kubeboot, "upgrade", verb, "--config", o.Config, "-o", "json"}
		if o.ControlPlane {
			argv = append(argv, "--kubernetes-version", o.Version)
		}
		return argv, "kubeboot upgrade " + verb, nil
	}
	_, kubeadm := os.Stat(h.Kubeadm)
	_, joined := os.Stat(h.KubeadmJoined)
	if o.ControlPlane || kubeadm != nil || joined != nil {
		return nil, "", fmt.Errorf("this node has no %s, nor is it a worker with kubeadm (%s) that `kubeadm join` joined (%s): "+
			"bring it up with kubeboot, or name the file every node has with upgrade cluster --node-config", o.Config, h.Kubeadm, h.KubeadmJoined)
	}
	argv = []string{h.Kubeadm, "upgrade", "node"}
	if o.KubeadmIgnorePreflightErrors != "" {
		argv = append(argv, "--ignore-preflight-errors="+o.KubeadmIgnorePreflightErrors)
	}
	return argv, "kubeadm upgrade node (this worker has no " + o.Config + ": `kubeadm join` joined it)", nil
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
	args = append(args, "--")
	for _, arg := range argv {
		// The service manager expands $VAR and ${VAR} in a unit's
		// command, and takes $$ for $: the command runs as given.
		args = append(args, strings.ReplaceAll(arg, "$", "$$"))
	}
	// Not bound to ctx: the unit goes on when this process is stopped,
	// and a later run waits for it.
	runErr := exec.Command(h.SystemdRun, args...).Run()
	logged, err := os.ReadFile(log)
	if err != nil && runErr == nil {
		return fmt.Errorf("read the unit's output: %w", err)
	}
	_, _ = out.Write(logged)
	if runErr != nil {
		return fmt.Errorf("%s failed (%w); its output is above", name, runErr)
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
