package clusterupgrade_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubeboot/kubeboot/internal/clusterupgrade"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/templates"
)

// lab is a fake cluster whose kubelets answer the upgrade pods: each
// ends Succeeded, its Node then at the pod's release, unless its node
// fails; evictions delete the pod unless a budget blocks it.
type lab struct {
	client *fake.Clientset
	mu     sync.Mutex
	// created are the upgrade pods in the order they were created.
	created []*corev1.Pod
	fail    map[string]bool
	blocked map[string]bool
	evicted []string
}

func node(name string, cp, unschedulable bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}, Spec: corev1.NodeSpec{Unschedulable: unschedulable},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.35.4"}, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	if cp {
		n.Labels["node-role.kubernetes.io/control-plane"] = ""
	}
	return n
}

// current is a worker at the release already.
func current(name string) *corev1.Node {
	n := node(name, false, false)
	n.Status.NodeInfo.KubeletVersion = "v1.36.3"
	return n
}

func pod(ns, name, nodeName string, owner *metav1.OwnerReference, annotations map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + name), Annotations: annotations}, Spec: corev1.PodSpec{NodeName: nodeName}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return p
}

var (
	yes        = true
	replicaSet = &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Controller: &yes}
	daemonSet  = &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "kube-proxy", Controller: &yes}
)

func newLab(t *testing.T, objects ...runtime.Object) *lab {
	l := &lab{client: fake.NewClientset(objects...), fail: map[string]bool{}, blocked: map[string]bool{}}
	l.client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		create := action.(k8stesting.CreateAction)
		switch obj := create.GetObject().(type) {
		case *policyv1.Eviction:
			if l.blocked[obj.Name] {
				return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
			}
			l.evicted = append(l.evicted, obj.Namespace+"/"+obj.Name)
			return true, nil, l.client.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), obj.Namespace, obj.Name)
		case *corev1.Pod:
			l.created = append(l.created, obj.DeepCopy())
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go l.kubelets(ctx)
	return l
}

// kubelets ends each upgrade pod that has not ended, as its node would.
func (l *lab) kubelets(ctx context.Context) {
	for ctx.Err() == nil {
		time.Sleep(2 * time.Millisecond)
		pods, err := l.client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: templates.UpgradePodLabel})
		if err != nil {
			continue
		}
		for _, p := range pods.Items {
			if p.Status.Phase != "" && p.Status.Phase != corev1.PodPending {
				continue
			}
			l.mu.Lock()
			fail := l.fail[p.Spec.NodeName]
			l.mu.Unlock()
			p.Status.Phase = corev1.PodSucceeded
			if fail {
				p.Status.Phase = corev1.PodFailed
			} else {
				n, _ := l.client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
				i := slices.Index(p.Spec.Containers[0].Args, "--kubernetes-version")
				n.Status.NodeInfo.KubeletVersion = p.Spec.Containers[0].Args[i+1]
				_, _ = l.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
			}
			_, _ = l.client.CoreV1().Pods("kube-system").UpdateStatus(ctx, &p, metav1.UpdateOptions{})
		}
	}
}

func (l *lab) createdOn() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var names []string
	for _, p := range l.created {
		names = append(names, p.Spec.NodeName)
	}
	return names
}

func (l *lab) state(t *testing.T) clusterupgrade.State {
	t.Helper()
	cm, err := l.client.CoreV1().ConfigMaps("kube-system").Get(context.Background(), clusterupgrade.StateName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var s clusterupgrade.State
	if err := json.Unmarshal([]byte(cm.Data["state"]), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func (l *lab) unschedulable(t *testing.T, name string) bool {
	t.Helper()
	n, err := l.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Spec.Unschedulable
}

var fleet = []clusterupgrade.Node{{Name: "cp1", ControlPlane: true}, {Name: "cp2", ControlPlane: true}, {Name: "w1"}, {Name: "w2"}, {Name: "w3"}, {Name: "w4", Current: true}}

func options() clusterupgrade.Options {
	return clusterupgrade.Options{Version: "v1.36.3", Nodes: fleet, NodeConfig: "/etc/kubeboot/node.yaml",
		Install: []string{"/bin/sh", "-c", "install kubelet"}, Image: "registry.k8s.io/pause:3.10.2", KubeadmIgnorePreflightErrors: "SystemVerification",
		Kubeboot:       templates.Kubeboot{Binary: "/usr/bin/kubeboot", Version: "v0.0.0-test"},
		MaxUnavailable: 2, DrainTimeout: 200 * time.Millisecond, NodeTimeout: 5 * time.Second, Poll: time.Millisecond}
}

func fleetObjects() []runtime.Object {
	return []runtime.Object{
		node("cp1", true, false), node("cp2", true, false), node("w1", false, false), node("w2", false, false),
		node("w3", false, true), // cordoned by its administrator
		current("w4"),
		pod("default", "web-a", "w1", replicaSet, nil),
		pod("kube-system", "kube-proxy-w1", "w1", daemonSet, nil),
		pod("kube-system", "kube-apiserver-cp1", "cp1", nil, map[string]string{"kubernetes.io/config.mirror": "x"}),
		pod("default", "web-b", "w2", replicaSet, nil),
	}
}

func run(l *lab, opts clusterupgrade.Options) (clusterupgrade.Result, string, error) {
	var out bytes.Buffer
	res, err := clusterupgrade.New(l.client, opts, output.NewReporter(&out, false)).Run(context.Background())
	return res, out.String(), err
}

// TestUpgradeCluster: the control-plane nodes one at a time, the first
// with upgrade apply, then the workers; each cordoned, drained (its
// DaemonSet's and static pods left), upgraded by a pod bound to it that
// runs the node's kubeboot with the install command, and uncordoned,
// except a node its administrator had cordoned; a node at the release
// already is left alone; the state says done.
func TestUpgradeCluster(t *testing.T) {
	l := newLab(t, fleetObjects()...)
	res, out, err := run(l, options())
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := l.createdOn(); !slices.Equal(got[:2], []string{"cp1", "cp2"}) || len(got) != 5 || slices.Contains(got, "w4") {
		t.Errorf("upgrade pods on %v, want cp1, cp2, then the workers but w4", got)
	}
	first := l.created[0].Spec.Containers[0]
	wantArgs := []string{"--node-config", "/etc/kubeboot/node.yaml", "--kubernetes-version", "v1.36.3", "--apply", "--control-plane",
		"--kubeadm-ignore-preflight-errors", "SystemVerification", "--", "/bin/sh", "-c", "install kubelet"}
	if !slices.Equal(first.Args, wantArgs) || first.Command[0] != "/host/usr/bin/kubeboot" || !*first.SecurityContext.Privileged || l.created[0].Spec.NodeName != "cp1" {
		t.Errorf("cp1's pod runs %q %q", first.Command, first.Args)
	}
	if args := l.created[1].Spec.Containers[0].Args; slices.Contains(args, "--apply") || !slices.Contains(args, "--control-plane") {
		t.Errorf("cp2's pod args %q, want upgrade node on a control-plane node", args)
	}
	slices.Sort(l.evicted)
	if !slices.Equal(l.evicted, []string{"default/web-a", "default/web-b"}) {
		t.Errorf("evicted %v, want the Deployment's pods alone", l.evicted)
	}
	for _, n := range []string{"cp1", "cp2", "w1", "w2"} {
		if l.unschedulable(t, n) {
			t.Errorf("%s is left cordoned", n)
		}
	}
	if !l.unschedulable(t, "w3") {
		t.Error("w3, cordoned by its administrator, was uncordoned")
	}
	for name, n := range l.state(t).Nodes {
		if n.Step != clusterupgrade.StepDone {
			t.Errorf("%s's step %q", name, n.Step)
		}
	}
	pods, _ := l.client.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{LabelSelector: templates.UpgradePodLabel})
	if len(pods.Items) != 0 || len(res.Nodes) != 6 || res.Nodes[4].Outcome != "upgraded" || res.Nodes[5].Outcome != "already at the release" {
		t.Errorf("%d upgrade pods left; result %+v", len(pods.Items), res)
	}
	// Again: every node is done, and nothing runs.
	before := len(l.createdOn())
	res, out, err = run(l, options())
	if err != nil || len(l.createdOn()) != before || res.Nodes[0].Outcome != "already at the release" || !strings.Contains(out, "resuming") {
		t.Errorf("second run: %v, %d pods created, %+v\n%s", err, len(l.createdOn())-before, res, out)
	}
}

// TestUpgradeClusterStopsAtAFailedNode: a node whose upgrade fails stops
// the upgrade there, with the pod's log; it is uncordoned, the next
// workers are not touched; a second run, the node fixed, takes up there.
func TestUpgradeClusterStopsAtAFailedNode(t *testing.T) {
	l := newLab(t, fleetObjects()...)
	l.fail["w1"] = true
	opts := options()
	opts.MaxUnavailable = 1
	_, out, err := run(l, opts)
	if err == nil || !strings.Contains(err.Error(), "w1: the upgrade on the node failed (pod kube-system/kubeboot-upgrade-w1, kept for its logs):\nfake logs") ||
		!strings.Contains(err.Error(), "run `kubeboot upgrade cluster v1.36.3` again") {
		t.Fatalf("err %v\n%s", err, out)
	}
	if got := l.createdOn(); !slices.Equal(got, []string{"cp1", "cp2", "w1"}) {
		t.Errorf("upgrade pods on %v, want none after w1's", got)
	}
	if l.unschedulable(t, "w1") || l.state(t).Nodes["w1"].Step != clusterupgrade.StepFailed || l.state(t).Nodes["cp2"].Step != clusterupgrade.StepDone {
		t.Errorf("w1 cordoned %v, state %+v", l.unschedulable(t, "w1"), l.state(t))
	}
	l.mu.Lock()
	l.fail["w1"] = false
	l.mu.Unlock()
	if _, out, err := run(l, opts); err != nil {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	if got := l.createdOn(); !slices.Equal(got, []string{"cp1", "cp2", "w1", "w1", "w2", "w3"}) {
		t.Errorf("upgrade pods on %v, want w1 again, then w2 and w3", got)
	}
}

// TestUpgradeClusterResumes: a run stopped while cp2's pod ran waits for
// that pod instead of starting another, leaves cp1 alone, and uncordons
// cp2, which it had cordoned.
func TestUpgradeClusterResumes(t *testing.T) {
	objects := fleetObjects()
	objects[1] = node("cp2", true, true)
	cp1 := node("cp1", true, false)
	cp1.Status.NodeInfo.KubeletVersion = "v1.36.3"
	objects[0] = cp1
	state, _ := json.Marshal(clusterupgrade.State{Version: "v1.36.3", Nodes: map[string]clusterupgrade.NodeState{
		"cp1": {Step: clusterupgrade.StepDone}, "cp2": {Step: clusterupgrade.StepDrained, Cordoned: true}}})
	running := templates.UpgradePod("cp2", "pause", templates.Kubeboot{Binary: "/usr/bin/kubeboot"}, []string{"--kubernetes-version", "v1.36.3"})
	objects = append(objects, running, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: clusterupgrade.StateName}, Data: map[string]string{"state": string(state)}})
	l := newLab(t, objects...)
	res, out, err := run(l, options())
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := l.createdOn(); slices.Contains(got, "cp1") || slices.Contains(got, "cp2") {
		t.Errorf("upgrade pods created on %v: cp1 was done and cp2's ran", got)
	}
	if !strings.Contains(out, "[cp2] waiting for pod kube-system/kubeboot-upgrade-cp2, which a stopped run started") || res.Nodes[0].Outcome != "already at the release" {
		t.Errorf("output:\n%s\nresult %+v", out, res)
	}
	if l.unschedulable(t, "cp2") {
		t.Error("cp2, cordoned by the stopped run, is left cordoned")
	}
}

// TestUpgradeClusterDrainRefusals: a PodDisruptionBudget that blocks an
// eviction past --drain-timeout, and a pod without a controller, stop the
// upgrade at the node, naming the pod; the node is uncordoned and its
// upgrade never started.
func TestUpgradeClusterDrainRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(*lab)
		extra runtime.Object
		want  string
	}{
		{"a budget", func(l *lab) { l.blocked["web-a"] = true }, nil,
			"w1: drain: pod default/web-a was not evicted within --drain-timeout 200ms: Cannot evict pod as it would violate the pod's disruption budget."},
		{"a bare pod", func(*lab) {}, pod("default", "debug", "w1", nil, nil),
			"w1: drain: pods without a controller would be lost, which nothing brings back: default/debug"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objects := fleetObjects()
			if tc.extra != nil {
				objects = append(objects, tc.extra)
			}
			l := newLab(t, objects...)
			tc.setup(l)
			opts := options()
			opts.MaxUnavailable = 1
			_, out, err := run(l, opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q\n%s", err, tc.want, out)
			}
			if got := l.createdOn(); !slices.Equal(got, []string{"cp1", "cp2"}) || l.unschedulable(t, "w1") {
				t.Errorf("upgrade pods on %v; w1 cordoned %v", got, l.unschedulable(t, "w1"))
			}
		})
	}
}

// TestUpgradeClusterRefusesAnotherUnfinishedRelease: the state of an
// unfinished upgrade to another release is not overwritten.
func TestUpgradeClusterRefusesAnotherUnfinishedRelease(t *testing.T) {
	state, _ := json.Marshal(clusterupgrade.State{Version: "v1.36.2", Nodes: map[string]clusterupgrade.NodeState{"cp1": {Step: clusterupgrade.StepDone}, "cp2": {Step: clusterupgrade.StepDrained}}})
	l := newLab(t, append(fleetObjects(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: clusterupgrade.StateName}, Data: map[string]string{"state": string(state)}})...)
	_, _, err := run(l, options())
	if err == nil || !strings.Contains(err.Error(), "records an unfinished upgrade to v1.36.2 (cp2: drained): run `kubeboot upgrade cluster v1.36.2` to finish it first") || len(l.createdOn()) != 0 {
		t.Fatalf("err %v; pods on %v", err, l.createdOn())
	}
}

// TestUpgradeClusterUncordonsWhatItCordoned: a node a failed run left
// cordoned (its uncordon failed too) is uncordoned by the next, though it
// is unschedulable when that run begins.
func TestUpgradeClusterUncordonsWhatItCordoned(t *testing.T) {
	objects := fleetObjects()
	objects[2] = node("w1", false, true)
	state, _ := json.Marshal(clusterupgrade.State{Version: "v1.36.3", Nodes: map[string]clusterupgrade.NodeState{"w1": {Step: clusterupgrade.StepFailed, Cordoned: true}}})
	l := newLab(t, append(objects, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: clusterupgrade.StateName}, Data: map[string]string{"state": string(state)}})...)
	if _, out, err := run(l, options()); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if l.unschedulable(t, "w1") || !l.unschedulable(t, "w3") {
		t.Errorf("w1 cordoned %v (want uncordoned), w3 cordoned %v (want its administrator's cordon kept)", l.unschedulable(t, "w1"), l.unschedulable(t, "w3"))
	}
}

// TestUpgradeClusterRefusesASecondRun: a run whose state another run
// changed (its update refused as a conflict, the state not what it wrote)
// stops at that step, before it touches another node.
func TestUpgradeClusterRefusesASecondRun(t *testing.T) {
	l := newLab(t, fleetObjects()...)
	l.client.PrependReactor("update", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(corev1.Resource("configmaps"), clusterupgrade.StateName, nil)
	})
	_, out, err := run(l, options())
	if err == nil || !strings.Contains(err.Error(), "kube-system/kubeboot-upgrade-cluster changed under this run: another `upgrade cluster` runs") || len(l.createdOn()) != 0 {
		t.Fatalf("err %v; upgrade pods on %v\n%s", err, l.createdOn(), out)
	}
	if l.unschedulable(t, "cp2") {
		t.Error("cp2 was cordoned")
	}
}

// TestUpgradeClusterWaitsForTheControllers: after a control-plane node's
// upgrade, no worker is drained until a controller-manager renews its
// Lease: one that stopped with the node keeps it, and nobody would move
// the drained pods' endpoints. A Lease never renewed stops the upgrade at
// that node, naming it; renewed, the next run goes on.
func TestUpgradeClusterWaitsForTheControllers(t *testing.T) {
	holder, renewed := "cp1_0123", metav1.NewMicroTime(time.Now().Add(-time.Minute))
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-controller-manager"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &renewed}}
	l := newLab(t, append(fleetObjects(), lease)...)
	opts := options()
	opts.NodeTimeout = 300 * time.Millisecond
	_, out, err := run(l, opts)
	if err == nil || !strings.Contains(err.Error(), "cp1: no kube-controller-manager renewed the Lease kube-system/kube-controller-manager within --node-timeout 300ms (held by cp1_0123)") {
		t.Fatalf("err %v\n%s", err, out)
	}
	if got := l.createdOn(); !slices.Equal(got, []string{"cp1"}) || len(l.evicted) > 0 {
		t.Errorf("upgrade pods on %v, evicted %v: nothing may move before the controllers run", got, l.evicted)
	}

	// A controller-manager that leads renews its Lease every few seconds.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
			cur, err := l.client.CoordinationV1().Leases("kube-system").Get(ctx, "kube-controller-manager", metav1.GetOptions{})
			if err != nil {
				continue
			}
			now := metav1.NowMicro()
			cur.Spec.RenewTime = &now
			_, _ = l.client.CoordinationV1().Leases("kube-system").Update(ctx, cur, metav1.UpdateOptions{})
		}
	}()
	if _, out, err := run(l, opts); err != nil || strings.Count(out, "the controllers run: cp1_0123 leads the controller-manager") != 2 {
		t.Fatalf("with the Lease renewed: %v\n%s", err, out)
	}
}
