package clusterupgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strings"

	"github.com/kubeboot/kubeboot/internal/nodepod"
)

// OnNode is a node's own part of `upgrade cluster`, which the upgrade pod
// runs inside the node's root (nodepod.Enter): the kubelet's install command,
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

// Unit names of the node's upgrade.
const (
	installUnit = "kubeboot-upgrade-kubelet"
	upgradeUnit = "kubeboot-upgrade-node"
)

// Run upgrades the node: the install command with KUBERNETES_VERSION in its
// environment, then `kubeboot upgrade apply|node`, printing each one's
// output to out. A worker without the node's file, but with kubeadm and
// the kubelet flags `kubeadm join` writes, was joined by kubeadm: it runs
// `kubeadm upgrade node` instead, then restarts the kubelet, as kubeadm's
// documentation says. Any other node without the file, or one without
// systemd, is refused before anything runs.
func (o OnNode) Run(ctx context.Context, h nodepod.Host, out io.Writer) error {
	argv, what, err := o.upgrade(h)
	if err != nil {
		return err
	}
	if err := h.CheckSystemd("upgrade cluster", "run `kubeboot upgrade node` on it by hand"); err != nil {
		return err
	}
	if len(o.Install) > 0 {
		if err := h.Unit(ctx, installUnit, []string{"KUBERNETES_VERSION=" + o.Version}, o.Install, out); err != nil {
			return fmt.Errorf("the kubelet's install command (kubelet.installCommand): %w", err)
		}
	}
	if err := h.Unit(ctx, upgradeUnit, nil, argv, out); err != nil {
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
func (o OnNode) upgrade(h nodepod.Host) (argv []string, what string, err error) {
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
