package worker

import (
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/phases"
)

// kubeletArgs are the kubelet's flags on a joining worker: its TLS
// bootstrap credential, the kubeconfig the bootstrap writes, its
// configuration, its node name (always given, so that the Node the join
// checks and waits for is the one the kubelet registers) and, when set,
// its node IPs and the labels it registers the Node with (node.labels).
func kubeletArgs(w *config.WorkerConfiguration) []string {
	args := []string{
		"--bootstrap-kubeconfig=" + w.KubeconfigPath(config.KubeconfigBootstrapKubelet),
		"--kubeconfig=" + w.KubeconfigPath(config.KubeconfigKubelet),
		"--config=" + w.Kubelet.ConfigFile,
		"--hostname-override=" + w.Node.Name,
	}
	if w.Node.Address != "" {
		args = append(args, "--node-ip="+config.NodeIPFlag(w.Node.Address, w.Node.SecondaryAddress))
	}
	if len(w.Node.Labels) > 0 {
		args = append(args, "--node-labels="+config.NodeLabelsFlag(w.Node.Labels))
	}
	return args
}

// Kubelet is how systemd runs a joining worker's kubelet, the unit
// of its kubelet-start (phases.KubeletStart(Kubelet)): with
// kubeletArgs, restarted when its configuration, the cluster CA or its
// bootstrap kubeconfig changed.
func Kubelet(s *Node) (phases.KubeletUnit, error) {
	w := s.Config
	host, port := phases.KubeletAddress(w.Kubelet.ExtraConfig)
	return phases.KubeletUnit{
		Comment:    "Written by kubeboot join: this node's kubelet joins its cluster with these flags.",
		Args:       kubeletArgs(w),
		StartFiles: []string{w.Kubelet.ConfigFile, w.CAPath(), w.KubeconfigPath(config.KubeconfigBootstrapKubelet)},
		Host:       host,
		Port:       port,
		Then:       "then run `kubeboot join phase kubelet-wait-bootstrap` with this join's flags",
	}, nil
}
