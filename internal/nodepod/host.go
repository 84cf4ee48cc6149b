package nodepod

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Host is what runs on the node: systemd's tools and the node's
// kubeboot (and kubeadm, for a worker kubeadm joined), and the directory
// of the units' output, all paths in the node's root.
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

// LogDir is where a node's units write their output (Host.Unit): it stays
// on the node when the pod's log cannot be read.
const LogDir = "/run/kubeboot"

// Enter makes root, where the pod sees the node's root, the process's
// root directory ("/" changes nothing), and returns the node's Host:
// systemd's tools in /usr/bin, the units' output in /run/kubeboot, and as
// its kubeboot this binary, which the pod runs from the node's root.
func Enter(root string) (Host, error) {
	self, err := os.Executable()
	if err != nil {
		return Host{}, err
	}
	if root != "/" {
		if err := syscall.Chroot(root); err != nil {
			return Host{}, fmt.Errorf("enter the node's root %s (the pod runs privileged, with the node's / mounted there): %w", root, err)
		}
		if err := os.Chdir("/"); err != nil {
			return Host{}, err
		}
	}
	return Host{SystemdRun: "/usr/bin/systemd-run", Systemctl: "/usr/bin/systemctl", Booted: "/run/systemd/system",
		Kubeboot: strings.TrimPrefix(self, strings.TrimSuffix(root, "/")),
		Kubeadm:  "/usr/bin/kubeadm", KubeadmJoined: "/var/lib/kubelet/kubeadm-flags.env", LogDir: LogDir, Poll: 2 * time.Second}, nil
}

// CheckSystemd fails unless systemd runs the node, with its tools there,
// saying that what runs the node's work as a unit, and byHand what to do.
func (h Host) CheckSystemd(what, byHand string) error {
	for _, path := range []string{h.SystemdRun, h.Systemctl, h.Booted} {
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("this node has no systemd (%w): %s runs the node's work as a transient unit; %s", err, what, byHand)
		}
	}
	return nil
}

// Unit runs argv as the transient unit name with env, once any run of it an
// earlier pod started has ended, and prints its output to out.
func (h Host) Unit(ctx context.Context, name string, env, argv []string, out io.Writer) error {
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
