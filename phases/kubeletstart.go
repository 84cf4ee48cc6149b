package phases

import (
	"context"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/workflow"
)

// KubeletStart is the kubelet-start phase of a workflow whose data is D,
// as kubeadm's: it makes systemd run the node's kubelet as unit(d) says
// (StartKubelet), writing SystemdDropIn and restarting kubelet.service
// when a file the kubelet reads at start changed in this run or it is not
// active. Without systemd it says how to start the kubelet and goes on;
// beside a kubelet that kubelet.service does not run, it changes nothing,
// and `--skip-phases kubelet-start` leaves the kubelet to whoever starts it
// otherwise.
func KubeletStart[D workflow.Data](unit func(D) (KubeletUnit, error)) workflow.Phase[D] {
	return workflow.Phase[D]{
		Name:     "kubelet-start",
		Short:    "Start the kubelet through systemd with a drop-in holding this node's flags (without systemd: say how to start it)",
		LiveOnly: true,
		Run: func(ctx context.Context, d D) error {
			u, err := unit(d)
			if err != nil {
				return err
			}
			return StartKubelet(ctx, d.Base(), u)
		},
	}
}

// kubeletArgs are the kubelet's flags on a control-plane node: its
// configuration, its kubeconfig, the directory of the client certificate
// it rotates, its node name (the Node mark-control-plane waits for) and
// its node IPs, the advertise address and the secondary one.
func kubeletArgs(c *config.ClusterConfiguration) []string {
	return []string{
		"--config=" + c.Kubelet.ConfigFile,
		"--kubeconfig=" + c.KubeconfigPath(config.KubeconfigKubelet),
		"--cert-dir=" + c.Kubelet.CertDir,
		"--hostname-override=" + c.Node.Name,
		"--node-ip=" + config.NodeIPFlag(c.Node.AdvertiseAddress, c.Node.SecondaryAddress),
	}
}

// ControlPlaneKubelet is how systemd runs a control-plane node's kubelet,
// the unit of its kubelet-start (KubeletStart(ControlPlaneKubelet)): with
// kubeletArgs, so that it runs the static pods write-manifests wrote, and
// restarted when a file it reads at start changed.
func ControlPlaneKubelet(s *Node) (KubeletUnit, error) {
	c := s.Config
	host, port := KubeletAddress(c.Kubelet.ExtraConfig)
	return KubeletUnit{
		Comment:    "Written by kubeboot: this control-plane node's kubelet runs its static pods with these flags.",
		Args:       kubeletArgs(c),
		StartFiles: []string{c.Kubelet.ConfigFile, c.KubeconfigPath(config.KubeconfigKubelet), c.CertPath(config.CertCA)},
		Host:       host,
		Port:       port,
		Then: "within timeouts.controlPlane (" + c.Timeouts.ControlPlane.Duration.String() +
			"): the wait phase waits that long for it to run the static pods",
	}, nil
}
