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

// AddonCNI applies the pod network (addons.cni.provider: flannel):
// flannel's DaemonSet, which installs the CNI plugin and its configuration
// on every node, the ConfigMap holding the network, ServiceAccount and
// RBAC; and kubeboot's NetworkPolicy enforcer, a DaemonSet running each
// node's kubeboot, with its ServiceAccount and RBAC.
var AddonCNI = addonPart("addon/cni", "Install flannel, the pod network, and kubeboot's NetworkPolicy enforcer on every node", podNetworkAddon)

// AddonCoreDNS applies CoreDNS: Deployment coredns behind Service kube-dns
// at the kubelets' clusterDNS address, its Corefile, ServiceAccount and
// RBAC.
var AddonCoreDNS = addonPart("addon/coredns", "Install CoreDNS, the cluster DNS, behind Service kube-dns at the kubelets' clusterDNS address", coreDNSAddon)

// AddonKubeProxy applies kube-proxy: its DaemonSet, the ConfigMap holding
// its KubeProxyConfiguration (which kubeadm join reads too), its
// ServiceAccount and RBAC.
var AddonKubeProxy = addonPart("addon/kube-proxy", "Install kube-proxy, the Service proxy, on every node", kubeProxyAddon)

// addon is one addon: whether the configuration turns it off, what the
// report says then (switchOff + " objects are neither created nor
// changed"), and the objects it applies, built for the configuration and
// the node's kubeboot binary (which kubeboot's own pods run).
type addon struct {
	off       func(config.Addons) bool
	switchOff string
	build     func(*config.ClusterConfiguration, templates.Kubeboot) ([]templates.Objects, error)
}

// addons are the addons in the order the addon phase applies them.
var addons = []addon{podNetworkAddon, coreDNSAddon, kubeProxyAddon}

var (
	podNetworkAddon = addon{
		off:       func(a config.Addons) bool { return a.CNI.Provider != config.CNIFlannel },
		switchOff: "addons.cni.provider: none: the pod network's",
		build: func(c *config.ClusterConfiguration, kb templates.Kubeboot) ([]templates.Objects, error) {
			flannel, err := templates.FlannelObjects(c)
			if err != nil {
				return nil, err
			}
			enforcer, err := templates.NetworkPolicyObjects(c, kb)
			return []templates.Objects{flannel, enforcer}, err
		},
	}
	coreDNSAddon = addon{
		off:       func(a config.Addons) bool { return a.CoreDNS.Disabled },
		switchOff: "addons.coreDNS.disabled: CoreDNS's",
		build:     configOnly(templates.CoreDNSObjects),
	}
	kubeProxyAddon = addon{
		off:       func(a config.Addons) bool { return a.KubeProxy.Disabled },
		switchOff: "addons.kubeProxy.disabled: kube-proxy's",
		build:     configOnly(templates.KubeProxyObjects),
	}
)

// configOnly is the build of an addon whose objects need only the
// configuration.
func configOnly(build func(*config.ClusterConfiguration) (templates.Objects, error)) func(*config.ClusterConfiguration, templates.Kubeboot) ([]templates.Objects, error) {
	return func(c *config.ClusterConfiguration, _ templates.Kubeboot) ([]templates.Objects, error) {
		objs, err := build(c)
		return []templates.Objects{objs}, err
	}
}

// joined is the objects of sets as one set, each kind's in the sets'
// order.
func joined(sets []templates.Objects) templates.Objects {
	var all templates.Objects
	for _, o := range sets {
		all.ServiceAccounts = append(all.ServiceAccounts, o.ServiceAccounts...)
		all.ConfigMaps = append(all.ConfigMaps, o.ConfigMaps...)
		all.Roles = append(all.Roles, o.Roles...)
		all.RoleBindings = append(all.RoleBindings, o.RoleBindings...)
		all.ClusterRoles = append(all.ClusterRoles, o.ClusterRoles...)
		all.ClusterRoleBindings = append(all.ClusterRoleBindings, o.ClusterRoleBindings...)
		all.Services = append(all.Services, o.Services...)
		all.Deployments = append(all.Deployments, o.Deployments...)
		all.DaemonSets = append(all.DaemonSets, o.DaemonSets...)
	}
	return all
}

// addonPart is the subphase of one addon: it applies its objects, unless
// the configuration turns it off, which it reports.
func addonPart(name, short string, a addon) workflow.Phase[*Node] {
	return workflow.Phase[*Node]{Name: name, Short: short, LiveOnly: true, Run: func(ctx context.Context, s *Node) error {
		if a.off(s.Config.Addons) {
			reportOff(s, a)
			return nil
		}
		sets, err := a.build(s.Config, s.System.Kubeboot)
		if err != nil {
			return err
		}
		client, err := APIClient(s)
		if err != nil {
			return err
		}
		// One pass for the addon's sets: its waves hold every set's objects.
		return applyObjects(ctx, s, client, joined(sets))
	}}
}

// reportOff says that the configuration turns a off.
func reportOff(s *Node, a addon) {
	s.Report.Infof("%s objects are neither created nor changed", a.switchOff)
}

// ApplyAddons applies the objects of every addon the configuration turns
// on in one pass (see applyRun.all), then the user's manifests
// (AddonManifests): upgrade apply's move of addons that run already. The
// Addon phase, whose parts a user can skip one by one, makes a pass per
// addon, each with its own round trips: with nothing to change, those
// passes took about 80 ms of upgrade apply's 190 ms on a lab machine.
// One pass still applies every workload after the accounts, roles and
// bindings its pods use. It returns the addons' workloads as the API
// server has them after their applies, which WaitAddonsRolledOut judges
// before it reads any.
func ApplyAddons(ctx context.Context, s *Node) (*Workloads, error) {
	for _, a := range addons {
		if a.off(s.Config.Addons) {
			reportOff(s, a)
		}
	}
	sets, err := enabledAddons(s)
	if err != nil {
		return nil, err
	}
	applied := &Workloads{}
	if len(sets) > 0 {
		client, err := APIClient(s)
		if err != nil {
			return nil, err
		}
		if err := applyObjectsSeen(ctx, s, client, joined(sets), applied); err != nil {
			return nil, err
		}
	}
	_, err = workflow.Runner[*Node]{Phases: []workflow.Phase[*Node]{AddonManifests}}.Run(ctx, s, nil)
	return applied, err
}
