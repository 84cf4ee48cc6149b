package phases

import (
	"context"

	"github.com/kubeboot/kubeboot/config"
)

// KubeletStart makes systemd run this control-plane node's kubelet with
// KubeletArgs, as kubeadm's kubelet-start does, so that it runs the static
// pods write-manifests wrote: StartKubelet writes SystemdDropIn and
// restarts kubelet.service when its configuration, kubelet.conf or the
// cluster CA changed in this run, or when it is not active. Without
// systemd it says how to start the kubelet and goes on; beside a kubelet
// that kubelet.service does not run (the lab's), it changes nothing.
var KubeletStart = Phase{
	Name:     "kubelet-start",
	Short:    "Start the kubelet through systemd with a drop-in holding this node's flags (without systemd: say how to start it)",
	LiveOnly: true,
	Run: func(ctx context.Context, s *State) error {
		return StartKubelet(ctx, s, controlPlaneKubelet(s.Config))
	},
}

// KubeletArgs are the kubelet's flags on a control-plane node: its
// configuration, its kubeconfig, the directory of the client certificate
// it rotates, its node name (the Node mark-control-plane waits for) and
// its node IP, the advertise address.
func KubeletArgs(c *config.ClusterConfiguration) []string {
	return []string{
		"--config=" + c.Kubelet.ConfigFile,
		"--kubeconfig=" + c.KubeconfigPath(config.KubeconfigKubelet),
		"--cert-dir=" + c.Kubelet.CertDir,
		"--hostname-override=" + c.Node.Name,
		"--node-ip=" + c.Node.AdvertiseAddress,
	}
}

// controlPlaneKubelet is how systemd runs a control-plane node's kubelet:
// with KubeletArgs, restarted when a file it reads at start changed.
func controlPlaneKubelet(c *config.ClusterConfiguration) KubeletUnit {
	host, port := KubeletAddress(c.Kubelet.ExtraConfig)
	return KubeletUnit{
		Comment:    "Written by kubeboot: this control-plane node's kubelet runs its static pods with these flags.",
		Args:       KubeletArgs(c),
		StartFiles: []string{c.Kubelet.ConfigFile, c.KubeconfigPath(config.KubeconfigKubelet), c.CertPath(config.CertCA)},
		Host:       host,
		Port:       port,
		Then: "within timeouts.controlPlane (" + c.Timeouts.ControlPlane.Duration.String() +
			"): the wait phase waits that long for it to run the static pods",
	}
}
