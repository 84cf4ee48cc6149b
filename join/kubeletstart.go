package join

import (
	"context"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/phases"
)

// KubeletStart makes systemd run the kubelet with the join's flags
// (phases.StartKubelet): it writes phases.SystemdDropIn, and restarts
// kubelet.service when a file the kubelet reads at start changed in this
// run or the service is not active. Without systemd it says how to start
// the kubelet and goes on; beside a kubelet that kubelet.service does not
// run, it changes nothing. `--skip-phases kubelet-start` leaves the
// kubelet to whoever starts it otherwise, such as the lab.
var KubeletStart = phases.Phase{
	Name:     "kubelet-start",
	Short:    "Start the kubelet through systemd with a drop-in holding the join's flags (without systemd: say how to start it)",
	LiveOnly: true,
	Run: func(ctx context.Context, s *phases.State) error {
		w, err := worker(s)
		if err != nil {
			return err
		}
		return phases.StartKubelet(ctx, s, kubeletUnit(w))
	},
}

// KubeletArgs are the kubelet's flags on a joining worker: its TLS
// bootstrap credential, the kubeconfig the bootstrap writes, its
// configuration, its node name (always given, so that the Node the join
// checks and waits for is the one the kubelet registers) and, when set,
// its node IP and the labels it registers the Node with (node.labels).
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
	if len(w.Node.Labels) > 0 {
		args = append(args, "--node-labels="+config.NodeLabelsFlag(w.Node.Labels))
	}
	return args
}

// kubeletUnit is how systemd runs a joining worker's kubelet: with
// KubeletArgs, restarted when its configuration, the cluster CA or its
// bootstrap kubeconfig changed.
func kubeletUnit(w *config.WorkerConfiguration) phases.KubeletUnit {
	host, port := phases.KubeletAddress(w.Kubelet.ExtraConfig)
	return phases.KubeletUnit{
		Comment:    "Written by kubeboot join: this node's kubelet joins its cluster with these flags.",
		Args:       KubeletArgs(w),
		StartFiles: []string{w.Kubelet.ConfigFile, w.CAPath(), w.KubeconfigPath(config.KubeconfigBootstrapKubelet)},
		Host:       host,
		Port:       port,
		Then:       "then run `kubeboot join phase kubelet-wait-bootstrap` with this join's flags",
	}
}
