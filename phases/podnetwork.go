package phases

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/templates"
)

// ResetLeavesPodBridge is what reset says of the pod network's interfaces: a node
// joined again may get another pod range, and the bridge left on the old
// one then refuses the new pods (flannel: "cni0 already has an IP address
// different from ...") or gives them addresses no other node routes to.
const ResetLeavesPodBridge = "the pod network's interfaces (flannel's cni0 and flannel.1): before this node joins again, " +
	"`ip link delete cni0; ip link delete flannel.1; rm -rf /var/lib/cni/networks/cbr0`, or its new pods may get addresses of its old pod range, which no node routes to"

// CheckPodNetwork refuses to add flannel to a running cluster that has
// another pod network: upgrade apply's preflight. flannel became the
// default pod network (addons.cni.provider) after clusters had been made
// with their own; upgrading one of those with a configuration that does
// not say none would lay flannel over it. Such a cluster has no flannel
// DaemonSet and Ready nodes, which only a pod network makes Ready.
func CheckPodNetwork(ctx context.Context, s *Node) error {
	if s.Config.Addons.CNI.Provider != config.CNIFlannel {
		return nil
	}
	client, err := APIClient(s)
	if err != nil {
		return err
	}
	_, err = client.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, templates.FlannelName, metav1.GetOptions{})
	if err == nil || !apierrors.IsNotFound(err) {
		return err
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list the nodes: %w", err)
	}
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return &exit.UsageError{Msg: fmt.Sprintf("addons.cni.provider is flannel (its default), but this cluster runs another pod network: "+
					"it has no DaemonSet kube-system/%s and Node %s is Ready. Set addons.cni.provider: none in the configuration to keep yours, "+
					"or remove yours first to move to flannel", templates.FlannelName, n.Name)}
			}
		}
	}
	return nil
}
