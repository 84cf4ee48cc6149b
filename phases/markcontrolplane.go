package phases

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/templates"
)

// MarkControlPlane labels this node's Node node-role.kubernetes.io/control-plane
// and, unless node.controlPlaneTaint is off, taints it
// node-role.kubernetes.io/control-plane:NoSchedule, as kubeadm does. The
// kubelet registers the Node, so the phase first waits for it, restarting
// a kubelet that is late to register (PromptRegistration). It applies
// node.labels and node.taints with them, writes only those labels and the
// taints, and nothing when all are right already.
var MarkControlPlane = workflow.Phase[*Node]{
	Name:     markControlPlaneName,
	Short:    "Label this node as a control-plane node and taint it (node.controlPlaneTaint)",
	LiveOnly: true,
	Run:      runMarkControlPlane,
}

const markControlPlaneName = "mark-control-plane"

func runMarkControlPlane(ctx context.Context, s *Node) error {
	client, err := APIClient(s)
	if err != nil {
		return err
	}
	name := s.Config.Node.Name
	if err := PromptRegistration(ctx, s.Base(), client, name); err != nil {
		return err
	}
	node, err := waitForNode(ctx, client, name, s.Config.Timeouts.ControlPlane.Duration)
	if err != nil {
		return fmt.Errorf("%w: is the kubelet running with --kubeconfig %s and node name %s? (`--skip-phases %s` leaves the node unmarked)",
			err, s.Config.KubeconfigPath(config.KubeconfigKubelet), name, markControlPlaneName)
	}
	taint := config.On(s.Config.Node.ControlPlaneTaint)
	changed := false
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		marks, needed := templates.MarkControlPlane(node, taint, s.Config.Kubelet.ContainerRuntimeEndpoint)
		marks, needed = withNodeRegistration(marks, needed, node, s.Config.Node)
		if !needed {
			return nil
		}
		data, err := json.Marshal(marks)
		if err != nil {
			return fmt.Errorf("encode the marks of Node %q: %w", name, err)
		}
		// The patch carries the resourceVersion the taints were read at:
		// a concurrent change of the taints is a conflict, and the
		// marks are worked out again from the Node as it is now.
		force := true
		_, err = client.CoreV1().Nodes().Patch(ctx, name, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: FieldManager, Force: &force})
		if apierrors.IsConflict(err) {
			if fresh, getErr := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); getErr == nil {
				node = fresh
			}
			return err
		}
		changed = err == nil
		return err
	})
	if err != nil {
		return fmt.Errorf("apply Node %q: %w", name, err)
	}
	state := "untainted"
	if taint {
		state = "tainted " + templates.ControlPlaneTaint.ToString()
	}
	verb := "unchanged"
	if changed {
		verb = "updated"
	}
	if n := s.Config.Node; len(n.Labels)+len(n.Taints) > 0 {
		state += fmt.Sprintf(", with the %d label(s) of node.labels and the %d taint(s) of node.taints", len(n.Labels), len(n.Taints))
	}
	s.Report.Infof("Node %s %s: labelled %s, %s", name, verb, templates.LabelControlPlane, state)
	return nil
}

// withNodeRegistration adds node.labels and node.taints to the marks of
// node: the labels beside the control-plane label, and each taint in the
// place of the Node's of the same key and effect, so that the
// control-plane taint, in node.taints too, is there once. It says whether
// the Node needs the apply: the marks did, or it lacks a label or a taint,
// or it has a label kubeboot applied that node.labels no longer lists,
// which the apply takes off.
func withNodeRegistration(marks templates.NodeMarks, needed bool, node *corev1.Node, n config.NodeRegistration) (templates.NodeMarks, bool) {
	for k, v := range n.Labels {
		marks.Metadata.Labels[k] = v
		if have, ok := node.Labels[k]; !ok || have != v {
			needed = true
		}
	}
	for _, k := range appliedLabels(node) {
		if _, ok := marks.Metadata.Labels[k]; !ok {
			needed = true
		}
	}
	for _, t := range config.CoreTaints(n.Taints) {
		i := slices.IndexFunc(marks.Spec.Taints, func(have corev1.Taint) bool { return have.MatchTaint(&t) })
		switch {
		case i < 0:
			marks.Spec.Taints = append(marks.Spec.Taints, t)
			needed = true
		case marks.Spec.Taints[i].Value != t.Value:
			marks.Spec.Taints[i] = t
			needed = true
		}
	}
	return marks, needed
}

// appliedLabels are the keys of the labels of node that kubeboot's
// server-side apply owns.
func appliedLabels(node *corev1.Node) []string {
	var keys []string
	for _, m := range node.ManagedFields {
		if m.Manager != FieldManager || m.Operation != metav1.ManagedFieldsOperationApply || m.FieldsV1 == nil {
			continue
		}
		var owned struct {
			Metadata struct {
				Labels map[string]json.RawMessage `json:"f:labels"`
			} `json:"f:metadata"`
		}
		if json.Unmarshal(m.FieldsV1.GetRawBytes(), &owned) != nil {
			continue
		}
		for k := range owned.Metadata.Labels {
			if key, ok := strings.CutPrefix(k, "f:"); ok {
				keys = append(keys, key)
			}
		}
	}
	return keys
}

// waitForNode watches for the Node called name until it exists or timeout
// has passed.
func waitForNode(ctx context.Context, client kubernetes.Interface, name string, timeout time.Duration) (*corev1.Node, error) {
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	node, err := WatchNode(waitCtx, client, name, func(*corev1.Node) bool { return true })
	switch {
	case err == nil:
		return node, nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("wait for Node %q: %w", name, ctx.Err())
	case wait.Interrupted(err) || errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("the kubelet did not register Node %q within %s (timeouts.controlPlane)", name, timeout)
	}
	return nil, fmt.Errorf("wait for Node %q: %w", name, err)
}

// WatchNode watches the Node called name, from a list of it filtered by a
// field selector and a watch from there, until done says yes of it; it
// returns that Node. It ends with ctx: then the error is the watch's (see
// wait.Interrupted) and the Node the last state it saw, or nil if it saw
// none, for the caller to say what the Node lacked.
func WatchNode(ctx context.Context, client kubernetes.Interface, name string, done func(*corev1.Node) bool) (*corev1.Node, error) {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return client.CoreV1().Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return client.CoreV1().Nodes().Watch(ctx, o)
		},
	}
	// A client that cannot stream the initial list (a fake one) says so.
	listWatch := cache.ToListWatcherWithWatchListSemantics(lw, client)
	var last *corev1.Node
	event, err := watchtools.UntilWithSync(ctx, listWatch, &corev1.Node{}, nil, func(e watch.Event) (bool, error) {
		node, ok := e.Object.(*corev1.Node)
		if !ok || node.Name != name {
			return false, nil
		}
		if e.Type == watch.Deleted {
			last = nil
			return false, nil
		}
		last = node
		return (e.Type == watch.Added || e.Type == watch.Modified) && done(node), nil
	})
	if err != nil {
		return last, err
	}
	return event.Object.(*corev1.Node), nil
}
