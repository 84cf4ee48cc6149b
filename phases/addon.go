package phases

import (
	"context"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/templates"
)

// Addon installs the cluster's pod network (flannel), then its DNS and
// Service proxy, as kubeadm's addon phase does, with kubeadm's names and
// shapes: kubeadm's upgrade and join read them; then it applies the
// user's own manifests (AddonManifests). Each part can be skipped
// (--skip-phases addon/coredns) or turned off in the configuration, for a
// cluster that brings its own. Like kubeadm's, it does not wait for the
// addons: the nodes' pod network comes up with the first flannel pods,
// after init. upgrade apply waits for their rollout.
var Addon = workflow.Phase[*Node]{
	Name:      "addon",
	Short:     "Install the cluster's pod network (flannel), DNS (CoreDNS) and Service proxy (kube-proxy), then your own manifests",
	Subphases: []workflow.Phase[*Node]{AddonCNI, AddonCoreDNS, AddonKubeProxy, AddonManifests},
}

// AddonCNI applies flannel, the pod network (addons.cni.provider:
// flannel): its DaemonSet, which installs the CNI plugin and its
// configuration on every node, the ConfigMap holding the network,
// ServiceAccount and RBAC.
var AddonCNI = addonPart("addon/cni", "Install flannel, the pod network, on every node",
	"addons.cni.provider: none: the pod network's", func(a config.Addons) bool { return a.CNI.Provider != config.CNIFlannel }, templates.FlannelObjects)

// AddonCoreDNS applies CoreDNS: Deployment coredns behind Service kube-dns
// at the kubelets' clusterDNS address, its Corefile, ServiceAccount and
// RBAC.
var AddonCoreDNS = addonPart("addon/coredns", "Install CoreDNS, the cluster DNS, behind Service kube-dns at the kubelets' clusterDNS address",
	"addons.coreDNS.disabled: CoreDNS's", func(a config.Addons) bool { return a.CoreDNS.Disabled }, templates.CoreDNSObjects)

// AddonKubeProxy applies kube-proxy: its DaemonSet, the ConfigMap holding
// its KubeProxyConfiguration (which kubeadm join reads too), its
// ServiceAccount and RBAC.
var AddonKubeProxy = addonPart("addon/kube-proxy", "Install kube-proxy, the Service proxy, on every node",
	"addons.kubeProxy.disabled: kube-proxy's", func(a config.Addons) bool { return a.KubeProxy.Disabled }, templates.KubeProxyObjects)

// addonPart is the subphase of one addon: it applies the objects build
// makes, unless off says the configuration turns the addon off, which it
// reports as switchOff + " objects are neither created nor changed".
func addonPart(name, short, switchOff string, off func(config.Addons) bool, build func(*config.ClusterConfiguration) (templates.Objects, error)) workflow.Phase[*Node] {
	return workflow.Phase[*Node]{Name: name, Short: short, LiveOnly: true, Run: func(ctx context.Context, s *Node) error {
		if off(s.Config.Addons) {
			s.Report.Infof("%s objects are neither created nor changed", switchOff)
			return nil
		}
		objs, err := build(s.Config)
		if err != nil {
			return err
		}
		client, err := APIClient(s)
		if err != nil {
			return err
		}
		return applyObjects(ctx, s, client, objs)
	}}
}
