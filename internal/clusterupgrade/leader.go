package clusterupgrade

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeboot/kubeboot/internal/nodepod"
)

// controllerManagerLease is the Lease in kube-system that the leading
// kube-controller-manager holds and renews.
const controllerManagerLease = "kube-controller-manager"

// waitControllersLed waits, once a control-plane node is upgraded, until a
// kube-controller-manager leads the cluster: until its Lease is renewed
// after the wait began. Up to v1.36 a controller-manager that stops keeps
// its Lease (releasing it is the alpha gate
// ControllerManagerReleaseLeaderElectionLockOnExit), so when the upgraded
// node's led, no controller ran until the Lease expired and another took
// it: a drain in that time moves pods whose Services' endpoints nobody
// updates, and a Service answers from pods that are gone. A
// controller-manager that does not elect a leader has no Lease, and is
// not waited for.
func (u *Upgrade) waitControllersLed(ctx context.Context, report func(string, ...any)) error {
	leases := u.client.CoordinationV1().Leases(metav1.NamespaceSystem)
	first, err := leases.Get(ctx, controllerManagerLease, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the Lease kube-system/%s: %w", controllerManagerLease, err)
	}
	deadline := time.Now().Add(u.opts.NodeTimeout)
	for {
		if err := nodepod.Sleep(ctx, u.opts.Poll); err != nil {
			return err
		}
		l, err := leases.Get(ctx, controllerManagerLease, metav1.GetOptions{})
		if err == nil && l.Spec.RenewTime != nil && (first.Spec.RenewTime == nil || l.Spec.RenewTime.After(first.Spec.RenewTime.Time)) {
			report("the controllers run: %s leads the controller-manager", holder(l.Spec.HolderIdentity))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no kube-controller-manager renewed the Lease kube-system/%s within --node-timeout %s (held by %s): the controllers do not run; see the kube-controller-manager pods of the control-plane nodes",
				controllerManagerLease, u.opts.NodeTimeout, holder(first.Spec.HolderIdentity))
		}
	}
}

// holder is a Lease's holder as a message names it.
func holder(identity *string) string {
	if identity == nil || *identity == "" {
		return "nobody"
	}
	return *identity
}
