package phases

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/templates"
)

// addonPollInterval is how often WaitAddonsRolledOut reads the workloads.
const addonPollInterval = time.Second

// Workloads are Deployments and DaemonSets as their applies left them
// (see ApplyAddons): the object the API server returned, or the live one
// read before an apply that was not sent. A nil *Workloads holds none.
type Workloads struct {
	mu          sync.Mutex
	deployments map[string]*appsv1.Deployment
	daemonSets  map[string]*appsv1.DaemonSet
}

// keep adds obj when it is a Deployment or a DaemonSet.
func (w *Workloads) keep(obj any) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch o := obj.(type) {
	case *appsv1.Deployment:
		if w.deployments == nil {
			w.deployments = map[string]*appsv1.Deployment{}
		}
		w.deployments[qualifiedName(o)] = o
	case *appsv1.DaemonSet:
		if w.daemonSets == nil {
			w.daemonSets = map[string]*appsv1.DaemonSet{}
		}
		w.daemonSets[qualifiedName(o)] = o
	}
}

// deployment removes and returns the Deployment named like want, or nil.
func (w *Workloads) deployment(want *appsv1.Deployment) *appsv1.Deployment {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.deployments[qualifiedName(want)]
	delete(w.deployments, qualifiedName(want))
	return d
}

// daemonSet removes and returns the DaemonSet named like want, or nil.
func (w *Workloads) daemonSet(want *appsv1.DaemonSet) *appsv1.DaemonSet {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ds := w.daemonSets[qualifiedName(want)]
	delete(w.daemonSets, qualifiedName(want))
	return ds
}

// WaitAddonsRolledOut waits until the workloads of the addons the
// configuration turns on are rolled out, as `kubectl rollout status` judges
// it: the controller saw the current spec, every replica (or every node's
// pod) runs it and is available, and no old one is left. On timeout it
// names each workload that is not, with its counts. Its first look at a
// workload in applied (see ApplyAddons; nil for none) is that object;
// every other look reads the workload.
func WaitAddonsRolledOut(ctx context.Context, s *Node, timeout time.Duration, applied *Workloads) error {
	deployments, daemonSets, err := addonWorkloads(s)
	if err != nil || len(deployments)+len(daemonSets) == 0 {
		return err // no addon on: nothing to wait for
	}
	client, err := APIClient(s)
	if err != nil {
		return err
	}
	// Each workload's check says why it is not rolled out, or "".
	var checks []func(ctx context.Context) string
	for _, want := range deployments {
		checks = append(checks, func(ctx context.Context) string {
			d := applied.deployment(want)
			if d == nil {
				var err error
				if d, err = client.AppsV1().Deployments(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{}); err != nil {
					return fmt.Sprintf("Deployment %s/%s: %v", want.Namespace, want.Name, err)
				}
			}
			if why := DeploymentPending(d); why != "" {
				return fmt.Sprintf("Deployment %s/%s: %s", d.Namespace, d.Name, why)
			}
			return ""
		})
	}
	for _, want := range daemonSets {
		checks = append(checks, func(ctx context.Context) string {
			ds := applied.daemonSet(want)
			if ds == nil {
				var err error
				if ds, err = client.AppsV1().DaemonSets(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{}); err != nil {
					return fmt.Sprintf("DaemonSet %s/%s: %v", want.Namespace, want.Name, err)
				}
			}
			if why := DaemonSetPending(ds); why != "" {
				return fmt.Sprintf("DaemonSet %s/%s: %s", ds.Namespace, ds.Name, why)
			}
			return ""
		})
	}
	var pending []string
	check := func(ctx context.Context) (bool, error) {
		// The workloads are read at once: each read is a round trip.
		whys := make([]string, len(checks))
		var wg sync.WaitGroup
		for i, c := range checks {
			wg.Go(func() { whys[i] = c(ctx) })
		}
		wg.Wait()
		pending = slices.DeleteFunc(whys, func(why string) bool { return why == "" })
		return len(pending) == 0, nil
	}
	err = wait.PollUntilContextTimeout(ctx, addonPollInterval, timeout, true, check)
	if err != nil && len(pending) > 0 {
		return fmt.Errorf("addons not rolled out within %s: %s", timeout, strings.Join(pending, "; "))
	}
	if err == nil {
		s.Report.Infof("addons rolled out")
	}
	return err
}

// addonWorkloads are the Deployments and DaemonSets of the addons on.
func addonWorkloads(s *Node) ([]*appsv1.Deployment, []*appsv1.DaemonSet, error) {
	sets, err := enabledAddons(s)
	if err != nil {
		return nil, nil, err
	}
	var deployments []*appsv1.Deployment
	var daemonSets []*appsv1.DaemonSet
	for _, objs := range sets {
		deployments = append(deployments, objs.Deployments...)
		daemonSets = append(daemonSets, objs.DaemonSets...)
	}
	return deployments, daemonSets, nil
}

// enabledAddons are the objects of each addon the configuration turns on.
func enabledAddons(s *Node) ([]templates.Objects, error) {
	var out []templates.Objects
	for _, a := range addons {
		if a.off(s.Config.Addons) {
			continue
		}
		sets, err := a.build(s.Config, s.System.Kubeboot)
		if err != nil {
			return nil, err
		}
		out = append(out, sets...)
	}
	return out, nil
}

// DeploymentPending says why d is not rolled out, or "" when it is.
func DeploymentPending(d *appsv1.Deployment) string {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	switch {
	case st.ObservedGeneration < d.Generation:
		return "the controller has not seen the current spec yet"
	case st.UpdatedReplicas < want:
		return fmt.Sprintf("%d of %d replicas updated", st.UpdatedReplicas, want)
	case st.Replicas > st.UpdatedReplicas:
		return fmt.Sprintf("%d old replicas still running", st.Replicas-st.UpdatedReplicas)
	case st.AvailableReplicas < st.UpdatedReplicas:
		return fmt.Sprintf("%d of %d updated replicas available", st.AvailableReplicas, st.UpdatedReplicas)
	}
	return ""
}

// DaemonSetPending says why ds is not rolled out, or "" when it is.
func DaemonSetPending(ds *appsv1.DaemonSet) string {
	st := ds.Status
	switch {
	case st.ObservedGeneration < ds.Generation:
		return "the controller has not seen the current spec yet"
	case st.UpdatedNumberScheduled < st.DesiredNumberScheduled:
		return fmt.Sprintf("%d of %d nodes' pods updated", st.UpdatedNumberScheduled, st.DesiredNumberScheduled)
	case st.NumberAvailable < st.DesiredNumberScheduled:
		return fmt.Sprintf("%d of %d nodes' pods available", st.NumberAvailable, st.DesiredNumberScheduled)
	}
	return ""
}

// ControlPlanesBehind lists the other control-plane nodes whose API server
// runs an image other than the one this configuration renders. kubeadm
// moves the addons only once every control-plane node is upgraded, so
// that no older API server serves a newer addon; so does upgrade apply.
func ControlPlanesBehind(ctx context.Context, s *Node) ([]string, error) {
	pods, err := RenderPods(s)
	if err != nil {
		return nil, err
	}
	var want string
	for _, m := range pods {
		if m.Component == config.NameAPIServer {
			want = m.Pod.Spec.Containers[0].Image
		}
	}
	if want == "" {
		return nil, errors.New("no kube-apiserver manifest rendered")
	}
	client, err := APIClient(s)
	if err != nil {
		return nil, err
	}
	// From the watch cache (resourceVersion 0), as readLive reads: the
	// mirror pods trail the kubelets by seconds, the cache etcd by less.
	list, err := client.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "component=" + config.NameAPIServer, ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("list the API server pods: %w", err)
	}
	var behind []string
	for _, p := range list.Items {
		if p.Spec.NodeName == s.Config.Node.Name || len(p.Spec.Containers) == 0 {
			continue // this node's was just upgraded; its mirror pod may lag
		}
		if image := p.Spec.Containers[0].Image; image != want {
			behind = append(behind, fmt.Sprintf("%s (%s)", p.Spec.NodeName, image))
		}
	}
	return behind, nil
}

// StatefulSetPending says why ss is not rolled out, or "" when it is.
func StatefulSetPending(ss *appsv1.StatefulSet) string {
	want := int32(1)
	if ss.Spec.Replicas != nil {
		want = *ss.Spec.Replicas
	}
	st := ss.Status
	switch {
	case st.ObservedGeneration < ss.Generation:
		return "the controller has not seen the current spec yet"
	case st.UpdatedReplicas < want:
		return fmt.Sprintf("%d of %d replicas updated", st.UpdatedReplicas, want)
	case st.ReadyReplicas < want:
		return fmt.Sprintf("%d of %d replicas ready", st.ReadyReplicas, want)
	}
	return ""
}
