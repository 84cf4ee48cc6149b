package rotateca

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/templates"
)

// RestartAnnotation is the pod template annotation by which the rotation
// restarts a workload, as `kubectl rollout restart` does with its own:
// the rotation's ID and the step.
const RestartAnnotation = "kubeboot.io/rotate-ca"

// rootCAConfigMap is the ConfigMap in every namespace that the
// controller-manager keeps holding the CAs its root-ca-file names, which
// every pod's service-account volume projects as ca.crt.
const rootCAConfigMap = "kube-root-ca.crt"

// workload is a Deployment, DaemonSet or StatefulSet the rotation
// restarts.
type workload struct {
	kind, namespace, name string
}

func (w workload) String() string { return w.kind + " " + w.namespace + "/" + w.name }

// restartPods restarts, once every namespace's kube-root-ca.crt holds
// the new CA, every Deployment, DaemonSet and StatefulSet whose pods
// mount a service-account token, kube-system's first, and waits until
// each has rolled out:
// their new pods trust the new CA (read once by most clients, at their
// start) and hold tokens of the key signing then. A pod no controller
// owns is named, for its owner to delete.
func (r *Rotation) restartPods(ctx context.Context, step string) error {
	err := r.wait(ctx, r.opts.RolloutTimeout, "every namespace's "+rootCAConfigMap+" to hold the new CA", func() (string, error) {
		return r.rootCAPending(ctx)
	})
	if err != nil {
		return err
	}
	value := r.state.ID + "-" + step
	list, err := r.workloads(ctx)
	if err != nil {
		return err
	}
	if err := r.nameBarePods(ctx); err != nil {
		return err
	}
	// The cluster's own first (the pod network, kube-proxy, CoreDNS),
	// rolled out before the rest: a Service's endpoints that move while
	// kube-proxy restarts are not followed until it is back.
	var system, rest []workload
	for _, w := range list {
		if w.namespace == metav1.NamespaceSystem {
			system = append(system, w)
		} else {
			rest = append(rest, w)
		}
	}
	for _, group := range [][]workload{system, rest} {
		if len(group) == 0 {
			continue
		}
		for _, w := range group {
			if err := r.restart(ctx, w, value); err != nil {
				return err
			}
		}
		r.report.Infof("restarting %s, so that their pods trust the new CA and hold new tokens", workloadNames(group))
		err := r.wait(ctx, r.opts.RolloutTimeout, "the restarted workloads to roll out", func() (string, error) {
			var pending []string
			for _, w := range group {
				why, err := r.pending(ctx, w)
				if err != nil {
					return "", err
				}
				if why != "" {
					pending = append(pending, w.String()+": "+why)
				}
			}
			return strings.Join(pending, "; "), nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// workloadNames lists workloads, for messages.
func workloadNames(list []workload) string {
	var out []string
	for _, w := range list {
		out = append(out, w.String())
	}
	return strings.Join(out, ", ")
}

// rootCAPending names the namespaces whose kube-root-ca.crt does not hold
// the new CA yet.
func (r *Rotation) rootCAPending(ctx context.Context) (string, error) {
	nss, err := r.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	var behind []string
	for _, ns := range nss.Items {
		if ns.Status.Phase == corev1.NamespaceTerminating {
			continue
		}
		cm, err := r.client.CoreV1().ConfigMaps(ns.Name).Get(ctx, rootCAConfigMap, metav1.GetOptions{})
		if err != nil || !pki.Holds([]byte(cm.Data["ca.crt"]), r.newCA) {
			behind = append(behind, ns.Name)
		}
	}
	if len(behind) == 0 {
		return "", nil
	}
	return "not yet in " + strings.Join(behind, ", "), nil
}

// mountsToken says whether the pods of template mount a service-account
// token.
func mountsToken(spec corev1.PodSpec) bool {
	return spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken
}

// workloads lists what restartPods restarts; one whose update
// strategy is OnDelete is named and left, since no template change
// restarts it.
func (r *Rotation) workloads(ctx context.Context) ([]workload, error) {
	apps := r.client.AppsV1()
	var out []workload
	var left []string
	deployments, err := apps.Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, d := range deployments.Items {
		if mountsToken(d.Spec.Template.Spec) {
			out = append(out, workload{"Deployment", d.Namespace, d.Name})
		}
	}
	daemonSets, err := apps.DaemonSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, ds := range daemonSets.Items {
		w := workload{"DaemonSet", ds.Namespace, ds.Name}
		switch {
		case !mountsToken(ds.Spec.Template.Spec):
		case ds.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType:
			left = append(left, w.String())
		default:
			out = append(out, w)
		}
	}
	statefulSets, err := apps.StatefulSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, ss := range statefulSets.Items {
		w := workload{"StatefulSet", ss.Namespace, ss.Name}
		switch {
		case !mountsToken(ss.Spec.Template.Spec):
		case ss.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType:
			left = append(left, w.String())
		default:
			out = append(out, w)
		}
	}
	if len(left) > 0 {
		r.report.Warnf("not restarted, since their update strategy is OnDelete: %s; delete their pods yourself, so that they trust the new CA and hold new tokens before the old CA is dropped", strings.Join(left, ", "))
	}
	return out, nil
}

// restart sets RestartAnnotation of w's pod template to value, unless it
// has it.
func (r *Rotation) restart(ctx context.Context, w workload, value string) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{RestartAnnotation: value}}}}})
	if err != nil {
		return err
	}
	apps := r.client.AppsV1()
	opts := metav1.PatchOptions{FieldManager: "kubeboot"}
	switch w.kind {
	case "Deployment":
		_, err = apps.Deployments(w.namespace).Patch(ctx, w.name, types.MergePatchType, patch, opts)
	case "DaemonSet":
		_, err = apps.DaemonSets(w.namespace).Patch(ctx, w.name, types.MergePatchType, patch, opts)
	case "StatefulSet":
		_, err = apps.StatefulSets(w.namespace).Patch(ctx, w.name, types.MergePatchType, patch, opts)
	}
	if err != nil {
		return fmt.Errorf("restart %s: %w", w, err)
	}
	return nil
}

// pending says why w has not rolled out, or "".
func (r *Rotation) pending(ctx context.Context, w workload) (string, error) {
	apps := r.client.AppsV1()
	switch w.kind {
	case "Deployment":
		d, err := apps.Deployments(w.namespace).Get(ctx, w.name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return phases.DeploymentPending(d), nil
	case "DaemonSet":
		ds, err := apps.DaemonSets(w.namespace).Get(ctx, w.name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return phases.DaemonSetPending(ds), nil
	default:
		ss, err := apps.StatefulSets(w.namespace).Get(ctx, w.name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return phases.StatefulSetPending(ss), nil
	}
}

// nameBarePods warns of each pod that mounts a token and that no
// controller owns: static pods' mirrors and the rotation's own are none.
func (r *Rotation) nameBarePods(ctx context.Context) error {
	pods, err := r.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var bare []string
	for _, p := range pods.Items {
		_, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]
		_, ours := p.Labels[templates.RotateCAPodLabel]
		if mirror || ours || len(p.OwnerReferences) > 0 || !mountsToken(p.Spec) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		bare = append(bare, p.Namespace+"/"+p.Name)
	}
	if len(bare) > 0 {
		sort.Strings(bare)
		r.report.Warnf("pods no controller owns, which the rotation cannot restart: %s; delete and create them again yourself before the old CA is dropped", strings.Join(bare, ", "))
	}
	return nil
}
