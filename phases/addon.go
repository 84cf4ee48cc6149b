package phases

import (
	"context"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/templates"
)

// Addon installs the cluster's DNS and Service proxy, as kubeadm's addon
// phase does, with kubeadm's names and shapes: kubeadm's upgrade and join
// read them. Each part can be skipped (--skip-phases addon/coredns) or
// turned off in the configuration, for a cluster that brings its own.
// Like kubeadm's, it does not wait for the addons: CoreDNS needs a pod
// network, which may come later. upgrade apply waits for their rollout.
var Addon = Phase{
	Name:      "addon",
	Short:     "Install the cluster's DNS (CoreDNS) and Service proxy (kube-proxy)",
	Subphases: []Phase{AddonCoreDNS, AddonKubeProxy},
}

// AddonCoreDNS applies CoreDNS: Deployment coredns behind Service kube-dns
// at the kubelets' clusterDNS address, its Corefile, ServiceAccount and
// RBAC.
var AddonCoreDNS = Phase{
	Name:     "addon/coredns",
	Short:    "Install CoreDNS, the cluster DNS, behind Service kube-dns at the kubelets' clusterDNS address",
	LiveOnly: true,
	Run: func(ctx context.Context, s *State) error {
		if s.Config.Addons.CoreDNS.Disabled {
			s.Report.Infof("addons.coreDNS.disabled: CoreDNS's objects are neither created nor changed")
			return nil
		}
		return applyAddon(ctx, s, templates.CoreDNSObjects)
	},
}

// AddonKubeProxy applies kube-proxy: its DaemonSet, the ConfigMap holding
// its KubeProxyConfiguration (which kubeadm join reads too), its
// ServiceAccount and RBAC.
var AddonKubeProxy = Phase{
	Name:     "addon/kube-proxy",
	Short:    "Install kube-proxy, the Service proxy, on every node",
	LiveOnly: true,
	Run: func(ctx context.Context, s *State) error {
		if s.Config.Addons.KubeProxy.Disabled {
			s.Report.Infof("addons.kubeProxy.disabled: kube-proxy's objects are neither created nor changed")
			return nil
		}
		return applyAddon(ctx, s, templates.KubeProxyObjects)
	},
}

func applyAddon(ctx context.Context, s *State, build func(*config.ClusterConfiguration) (templates.Objects, error)) error {
	objs, err := build(s.Config)
	if err != nil {
		return err
	}
	client, err := apiClient(s)
	if err != nil {
		return err
	}
	return applyObjects(ctx, s, client, objs)
}
