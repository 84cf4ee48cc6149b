package controlplane

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
)

// UpgradePlan is what `kubeboot upgrade plan` prints: the cluster as it
// runs, what an upgrade to Target changes on each node and in the addons,
// and the order of the steps. Its JSON form is `-o json`'s.
type UpgradePlan struct {
	// Target is the release the plan upgrades to.
	Target string `json:"target"`
	// ClusterVersion is the kubernetesVersion of kube-system/kubeadm-config.
	ClusterVersion string `json:"clusterVersion"`
	// Nodes are the cluster's nodes, the control-plane nodes first.
	Nodes []NodePlan `json:"nodes"`
	// Addons are CoreDNS's and kube-proxy's images.
	Addons []Change `json:"addons"`
	// Steps are the commands to run, in order.
	Steps []string `json:"steps"`
}

// NodePlan is one node in an UpgradePlan.
type NodePlan struct {
	// Name is the Node's.
	Name string `json:"name"`
	// ControlPlane says that the node runs the control plane.
	ControlPlane bool `json:"controlPlane"`
	// Components are its kubelet's version and, on a control-plane node,
	// its static pods' images.
	Components []Change `json:"components"`
}

// Change is one thing an upgrade moves: what runs, and what will.
type Change struct {
	// Name is the component's, like kube-apiserver.
	Name string `json:"name"`
	// From is what runs now (an image, or the kubelet's version).
	From string `json:"from"`
	// To is what runs after the upgrade; equal to From when it stays.
	To string `json:"to"`
}

// PlanUpgrade reads the cluster through client and plans its upgrade to
// the release of target, a control-plane node's configuration at the new
// kubernetesVersion (as `upgrade apply` takes it): the images it renders
// are what the control plane and the addons move to. It refuses a target
// more than one minor above the oldest API server, a downgrade across
// minors, one older than a kubelet, and one too new for a kubelet (see
// checkComponentSkew).
func PlanUpgrade(ctx context.Context, run *workflow.Run, client kubernetes.Interface, target *config.ClusterConfiguration) (UpgradePlan, error) {
	to, err := config.ParseKubernetesVersion(target.KubernetesVersion)
	if err != nil {
		return UpgradePlan{}, &exit.UsageError{Msg: fmt.Sprintf("upgrade to %q: %v", target.KubernetesVersion, err)}
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return UpgradePlan{}, fmt.Errorf("list Nodes: %w", err)
	}
	pods, err := client.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "component"})
	if err != nil {
		return UpgradePlan{}, fmt.Errorf("list the control plane's pods: %w", err)
	}
	plan := UpgradePlan{Target: target.KubernetesVersion}
	// A cluster without kubeadm-config is planned all the same.
	plan.ClusterVersion, _ = phases.ClusterVersion(ctx, client)
	for _, n := range nodes.Items {
		_, cp := n.Labels["node-role.kubernetes.io/control-plane"]
		np := NodePlan{Name: n.Name, ControlPlane: cp,
			Components: []Change{{Name: "kubelet", From: n.Status.NodeInfo.KubeletVersion, To: n.Status.NodeInfo.KubeletVersion}}}
		for _, p := range pods.Items {
			if p.Spec.NodeName == n.Name && slices.Contains(config.ComponentNames, p.Labels["component"]) && len(p.Spec.Containers) > 0 {
				from := p.Spec.Containers[0].Image
				np.Components = append(np.Components, Change{Name: p.Labels["component"], From: from})
			}
		}
		plan.Nodes = append(plan.Nodes, np)
	}
	slices.SortStableFunc(plan.Nodes, func(a, b NodePlan) int {
		if a.ControlPlane != b.ControlPlane {
			if a.ControlPlane {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	if err := checkPlanSkew(plan, target.KubernetesVersion, to); err != nil {
		return UpgradePlan{}, err
	}
	images, err := phases.Images(&phases.Node{Run: run, Config: target})
	if err != nil {
		return UpgradePlan{}, err
	}
	for _, n := range plan.Nodes {
		for i, c := range n.Components[1:] {
			n.Components[i+1].To = imageOf(images, c.From)
		}
	}
	plan.Addons = addonChanges(ctx, client, images)
	plan.Steps = planSteps(plan, target.Node.Name)
	return plan, nil
}

// imageOf is the image of images with the repository name of from (its
// last path element), or from itself when images has none.
func imageOf(images []string, from string) string {
	name := repositoryName(from)
	for _, image := range images {
		if repositoryName(image) == name {
			return image
		}
	}
	return from
}

// repositoryName is an image reference's last path element without its tag.
func repositoryName(image string) string {
	image = image[strings.LastIndex(image, "/")+1:]
	name, _, _ := strings.Cut(image, ":")
	return name
}

// checkPlanSkew refuses a target (to, spelled target) the skew policy does
// not allow from what runs: more than one minor above the oldest API
// server, below the newest API server's minor, older than a kubelet, or
// more minors above a kubelet than the policy allows.
func checkPlanSkew(plan UpgradePlan, target string, to *version.Version) error {
	for _, component := range []string{config.NameAPIServer, "kubelet"} {
		for _, n := range plan.Nodes {
			for _, c := range n.Components {
				from, err := version.ParseGeneric(c.From[strings.LastIndex(c.From, ":")+1:])
				if err != nil || c.Name != component {
					continue
				}
				if err := checkComponentSkew(n.Name, c, from, target, to); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// checkComponentSkew is checkPlanSkew's rule for one component c of node,
// which runs version from. A kubelet's is the version skew policy's, as
// phases.CheckKubeletSkew applies it to the kubelet each node's upgrade
// restarts, and a release newer than the target.
func checkComponentSkew(node string, c Change, from *version.Version, target string, to *version.Version) error {
	switch {
	case c.Name == "kubelet" && from.GreaterThan(to):
		return &exit.UsageError{Msg: fmt.Sprintf("upgrade to %s: the kubelet of %s runs %s, newer than the control plane may be: a kubelet is never newer than the API server", target, node, c.From)}
	case c.Name == "kubelet":
		if err := phases.CheckKubeletSkew("the kubelet Node "+node+" reports", from, "the control plane this upgrade brings", to); err != nil {
			return &exit.UsageError{Msg: fmt.Sprintf("upgrade to %s: %v, on %s before this upgrade", target, err, node)}
		}
	case c.Name == config.NameAPIServer && (to.Major() != from.Major() || to.Minor() < from.Minor()):
		return &exit.UsageError{Msg: fmt.Sprintf("upgrade to %s: %s's API server runs %s, and downgrades across minor versions are not supported", target, node, c.From)}
	case c.Name == config.NameAPIServer && to.Minor() > from.Minor()+1:
		return &exit.UsageError{Msg: fmt.Sprintf("upgrade to %s: %s's API server runs %s: upgrade one minor version at a time (to v%d.%d first)", target, node, c.From, from.Major(), from.Minor()+1)}
	}
	return nil
}

// addonChanges are CoreDNS's and kube-proxy's images, as they run and as
// images renders them; an addon that is not there is left out.
func addonChanges(ctx context.Context, client kubernetes.Interface, images []string) []Change {
	var changes []Change
	if d, err := client.AppsV1().Deployments(metav1.NamespaceSystem).Get(ctx, "coredns", metav1.GetOptions{}); err == nil {
		changes = append(changes, containerChange("coredns", d.Spec.Template.Spec.Containers, images))
	}
	if ds, err := client.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, "kube-proxy", metav1.GetOptions{}); err == nil {
		changes = append(changes, containerChange("kube-proxy", ds.Spec.Template.Spec.Containers, images))
	}
	return changes
}

// containerChange is the change of the first container's image.
func containerChange(name string, containers []corev1.Container, images []string) Change {
	if len(containers) == 0 {
		return Change{Name: name}
	}
	return Change{Name: name, From: containers[0].Image, To: imageOf(images, containers[0].Image)}
}

// planSteps are the plan's commands in order: upgrade apply on this node
// (self) first, or on the first control-plane node when self is none (a
// plan from an administrator's machine), then upgrade node on the other
// control-plane nodes, each with its own configuration at the new
// version, then on every worker whose kubelet is not at the target (or
// kubeadm's upgrade node, on one kubeadm joined, which the cluster's
// objects do not tell apart). On
// each node the operator installs the kubelet of the target first, which
// the command restarts last.
func planSteps(plan UpgradePlan, self string) []string {
	if i := slices.IndexFunc(plan.Nodes, func(n NodePlan) bool { return n.ControlPlane }); i >= 0 &&
		!slices.ContainsFunc(plan.Nodes, func(n NodePlan) bool { return n.ControlPlane && n.Name == self }) {
		self = plan.Nodes[i].Name
	}
	install := "install the kubelet " + plan.Target + ", then "
	steps := []string{fmt.Sprintf("on %s: %skubeboot upgrade apply --config <this configuration> (its control plane, then kubeadm-config, kubelet-config and the addons, then its kubelet)", self, install)}
	for _, n := range plan.Nodes {
		if n.ControlPlane && n.Name != self {
			steps = append(steps, fmt.Sprintf("on %s: %skubeboot upgrade node --config <its configuration at %s>", n.Name, install, plan.Target))
		}
	}
	for _, n := range plan.Nodes {
		if !n.ControlPlane && n.Components[0].From != plan.Target {
			steps = append(steps, fmt.Sprintf("on %s: %skubeboot upgrade node --config <its WorkerConfiguration> (on a worker `kubeadm join` joined: kubeadm upgrade node, then restart the kubelet)", n.Name, install))
		}
	}
	return steps
}
