package phases

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/templates"
)

var notReady = corev1.Taint{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}

// registeredNode is node1 as its kubelet registers it.
func registeredNode() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node1", Labels: map[string]string{"kubernetes.io/hostname": "node1"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{notReady}},
	}
}

// countPatches counts the patches of Nodes.
func countPatches(client *fake.Clientset) *atomic.Int32 {
	var n atomic.Int32
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		n.Add(1)
		return false, nil, nil
	})
	return &n
}

func getNode(t *testing.T, client *fake.Clientset) *corev1.Node {
	t.Helper()
	node, err := client.CoreV1().Nodes().Get(context.Background(), "node1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return node
}

// TestMarkControlPlaneWaitsForTheNode: the kubelet registers the Node a
// moment after the phase starts; the phase sees it and marks it, keeping
// the kubelet's label and taint.
func TestMarkControlPlaneWaitsForTheNode(t *testing.T) {
	s, client, out := liveState(t, false)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, _ = client.CoreV1().Nodes().Create(context.Background(), registeredNode(), metav1.CreateOptions{FieldManager: "kubelet"})
	}()
	patches := countPatches(client)
	must(t, runMarkControlPlane(context.Background(), s))
	node := getNode(t, client)
	if diff := cmp.Diff(map[string]string{"kubernetes.io/hostname": "node1", templates.LabelControlPlane: ""}, node.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]corev1.Taint{notReady, templates.ControlPlaneTaint}, node.Spec.Taints); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
	const owns = `{"f:metadata":{"f:annotations":{"f:kubeadm.alpha.kubernetes.io/cri-socket":{}},"f:labels":{"f:node-role.kubernetes.io/control-plane":{}}},"f:spec":{"f:taints":{}}}`
	if owned := ownedBy(node.ManagedFields, FieldManager); owned != owns {
		t.Errorf("kubeboot owns %s of the Node, want %s", owned, owns)
	}
	if got := node.Annotations[templates.AnnotationCRISocket]; got != s.Config.Kubelet.ContainerRuntimeEndpoint {
		t.Errorf("CRI socket annotation %q, want %q, which kubeadm's commands on the node read", got, s.Config.Kubelet.ContainerRuntimeEndpoint)
	}
	if !strings.Contains(out.String(), "Node node1 updated: labelled node-role.kubernetes.io/control-plane, tainted node-role.kubernetes.io/control-plane:NoSchedule") {
		t.Errorf("output:\n%s", out)
	}
	if patches.Load() != 1 {
		t.Errorf("%d patches, want 1", patches.Load())
	}

	// A re-run writes nothing at all.
	out.Reset()
	rerunChangesNothing(t, s, client, MarkControlPlane)
	if patches.Load() != 1 {
		t.Errorf("the re-run patched the Node")
	}
	if !strings.Contains(out.String(), "Node node1 unchanged") {
		t.Errorf("re-run output:\n%s", out)
	}

	// Turning the taint off takes it off, and keeps the kubelet's.
	off := false
	s.Config.Node.ControlPlaneTaint = &off
	must(t, runMarkControlPlane(context.Background(), s))
	node = getNode(t, client)
	if diff := cmp.Diff([]corev1.Taint{notReady}, node.Spec.Taints); diff != "" {
		t.Errorf("taints with node.controlPlaneTaint off (-want +got):\n%s", diff)
	}
	if _, ok := node.Labels[templates.LabelControlPlane]; !ok {
		t.Error("the label went with the taint")
	}
	rerunChangesNothing(t, s, client, MarkControlPlane)
}

// TestMarkControlPlaneRetriesOnConflict: the taints changed between the
// read and the apply; the phase reads them again rather than drop the
// change.
func TestMarkControlPlaneRetriesOnConflict(t *testing.T) {
	s, client, _ := liveState(t, false, registeredNode())
	var calls atomic.Int32
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if calls.Add(1) == 1 {
			// Someone else's taint lands first.
			node := registeredNode()
			node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: "example.com/maintenance", Effect: corev1.TaintEffectNoSchedule})
			if _, err := client.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "", "node1"); err != nil {
				return true, nil, err
			}
			if err := client.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, node, ""); err != nil {
				return true, nil, err
			}
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "node1", nil)
		}
		return false, nil, nil
	})
	must(t, runMarkControlPlane(context.Background(), s))
	want := []corev1.Taint{notReady, {Key: "example.com/maintenance", Effect: corev1.TaintEffectNoSchedule}, templates.ControlPlaneTaint}
	if diff := cmp.Diff(want, getNode(t, client).Spec.Taints); diff != "" {
		t.Errorf("taints after a conflict (-want +got):\n%s", diff)
	}
	if calls.Load() != 2 {
		t.Errorf("%d patches, want 2", calls.Load())
	}
}

func TestMarkControlPlaneTimesOut(t *testing.T) {
	s, client, _ := liveState(t, false)
	s.Config.Timeouts.ControlPlane.Duration = 300 * time.Millisecond
	start := time.Now()
	err := runMarkControlPlane(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), `the kubelet did not register Node "node1" within 300ms (timeouts.controlPlane)`) ||
		!strings.Contains(err.Error(), "--skip-phases mark-control-plane") {
		t.Errorf("want a timeout naming the node and the way out, got %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %s", took)
	}
	if len(objects(t, client)) != 0 {
		t.Error("a Node was created")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.Config.Timeouts.ControlPlane.Duration = time.Minute
	if err := runMarkControlPlane(ctx, s); err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Errorf("an interrupted wait must say so, got %v", err)
	}
}

// TestMarkControlPlaneAppliesNodeRegistration: node.labels join the
// control-plane label and node.taints the Node's taints, the control-plane
// taint once although node.taints lists it too, and a taint the kubelet
// registered already is not added twice; a re-run writes nothing; a label
// taken out of node.labels is taken off the Node, and a taint's new value
// replaces the old.
func TestMarkControlPlaneAppliesNodeRegistration(t *testing.T) {
	dedicated := corev1.Taint{Key: "example.com/dedicated", Value: "etcd", Effect: corev1.TaintEffectNoExecute}
	node := registeredNode()
	node.Spec.Taints = append(node.Spec.Taints, dedicated) // registerWithTaints
	s, client, out := liveState(t, false, node)
	s.Config.Node.Labels = map[string]string{"example.com/zone": "a", "node.kubernetes.io/exclude-from-external-load-balancers": ""}
	s.Config.Node.Taints = []config.NodeTaint{
		{Key: templates.LabelControlPlane, Effect: corev1.TaintEffectNoSchedule},
		{Key: dedicated.Key, Value: dedicated.Value, Effect: dedicated.Effect},
		{Key: "example.com/spot", Effect: corev1.TaintEffectPreferNoSchedule},
	}
	patches := countPatches(client)
	must(t, runMarkControlPlane(context.Background(), s))
	got := getNode(t, client)
	wantLabels := map[string]string{"kubernetes.io/hostname": "node1", templates.LabelControlPlane: "",
		"example.com/zone": "a", "node.kubernetes.io/exclude-from-external-load-balancers": ""}
	if diff := cmp.Diff(wantLabels, got.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	spot := corev1.Taint{Key: "example.com/spot", Effect: corev1.TaintEffectPreferNoSchedule}
	if diff := cmp.Diff([]corev1.Taint{notReady, dedicated, templates.ControlPlaneTaint, spot}, got.Spec.Taints); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
	if !strings.Contains(out.String(), "with the 2 label(s) of node.labels and the 3 taint(s) of node.taints") || patches.Load() != 1 {
		t.Errorf("%d patches, output:\n%s", patches.Load(), out)
	}

	// A re-run writes nothing at all.
	rerunChangesNothing(t, s, client, MarkControlPlane)
	if patches.Load() != 1 {
		t.Error("the re-run patched the Node")
	}

	// A label taken out of node.labels goes; a taint's new value replaces the old.
	delete(s.Config.Node.Labels, "example.com/zone")
	s.Config.Node.Taints[1].Value = "ingress"
	must(t, runMarkControlPlane(context.Background(), s))
	got = getNode(t, client)
	delete(wantLabels, "example.com/zone")
	if diff := cmp.Diff(wantLabels, got.Labels); diff != "" {
		t.Errorf("labels after a label is taken out (-want +got):\n%s", diff)
	}
	dedicated.Value = "ingress"
	// Taints are a set: the apply moves the control-plane taint last.
	if diff := cmp.Diff([]corev1.Taint{notReady, dedicated, spot, templates.ControlPlaneTaint}, got.Spec.Taints); diff != "" {
		t.Errorf("taints after a new value (-want +got):\n%s", diff)
	}
	rerunChangesNothing(t, s, client, MarkControlPlane)
	if patches.Load() != 2 {
		t.Errorf("%d patches, want 2", patches.Load())
	}
}
