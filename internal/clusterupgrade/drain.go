package clusterupgrade

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubeboot/kubeboot/internal/nodepod"
)

// mirrorAnnotation marks the API's copy of a static pod.
const mirrorAnnotation = "kubernetes.io/config.mirror"

// cordon marks the Node name unschedulable (on) or schedulable again.
func (u *Upgrade) cordon(ctx context.Context, name string, on bool) error {
	patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, on)
	return nodepod.Retry(ctx, u.opts.Poll, func() error {
		if _, err := u.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("set %s's spec.unschedulable to %t: %w", name, on, err)
		}
		return nil
	})
}

// drain evicts the pods on node, as `kubectl drain --ignore-daemonsets
// --delete-emptydir-data` does: not the static pods' mirrors nor the
// DaemonSets' pods, which stay with the node, and no pod without a
// controller, which nothing would bring back (it is named, and the drain
// refused). An eviction a PodDisruptionBudget refuses is tried again
// until DrainTimeout, then the pod is named. It returns once every
// evicted pod is gone.
func (u *Upgrade) drain(ctx context.Context, node string, report func(string, ...any)) error {
	pods, err := u.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return fmt.Errorf("list the pods on the node: %w", err)
	}
	var evict []corev1.Pod
	var bare []string
	for _, p := range pods.Items {
		if p.Spec.NodeName != node { // as the selector says, for a client that ignores it
			continue
		}
		controller := metav1.GetControllerOf(&p)
		switch {
		case p.Annotations[mirrorAnnotation] != "", controller != nil && controller.Kind == "DaemonSet":
		case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
		case controller == nil:
			bare = append(bare, p.Namespace+"/"+p.Name)
		default:
			evict = append(evict, p)
		}
	}
	if len(bare) > 0 {
		return fmt.Errorf("pods without a controller would be lost, which nothing brings back: %s; delete them, or move them under a Deployment, then run again", strings.Join(bare, ", "))
	}
	deadline := time.Now().Add(u.opts.DrainTimeout)
	errs := make([]error, len(evict))
	done := make(chan struct{}, len(evict))
	for i, p := range evict {
		go func() {
			errs[i] = u.evict(ctx, p, deadline, report)
			done <- struct{}{}
		}()
	}
	for range evict {
		<-done
	}
	return errors.Join(errs...)
}

// evict evicts p, retrying while a PodDisruptionBudget refuses, until
// deadline, then waits until p is gone.
func (u *Upgrade) evict(ctx context.Context, p corev1.Pod, deadline time.Time, report func(string, ...any)) error {
	pods := u.client.CoreV1().Pods(p.Namespace)
	eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
	said := false
	for {
		err := pods.EvictV1(ctx, eviction)
		switch {
		case err == nil, apierrors.IsNotFound(err):
			report("evicted pod %s/%s", p.Namespace, p.Name)
			return u.waitGone(ctx, p, deadline)
		case !apierrors.IsTooManyRequests(err):
			return fmt.Errorf("evict pod %s/%s: %w", p.Namespace, p.Name, err)
		case time.Now().After(deadline):
			return fmt.Errorf("pod %s/%s was not evicted within --drain-timeout %s: %w", p.Namespace, p.Name, u.opts.DrainTimeout, err)
		case !said:
			report("pod %s/%s cannot be evicted yet (%v); trying again until --drain-timeout", p.Namespace, p.Name, err)
			said = true
		}
		if err := nodepod.Sleep(ctx, u.opts.Poll); err != nil {
			return err
		}
	}
}

// waitGone waits until p is deleted: not found, or replaced by a pod of
// the same name.
func (u *Upgrade) waitGone(ctx context.Context, p corev1.Pod, deadline time.Time) error {
	for {
		now, err := u.client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && now.UID != p.UID) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pod %s/%s, evicted, was still there at --drain-timeout %s", p.Namespace, p.Name, u.opts.DrainTimeout)
		}
		if err := nodepod.Sleep(ctx, u.opts.Poll); err != nil {
			return err
		}
	}
}
