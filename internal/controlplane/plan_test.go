package controlplane

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

// planCluster is a cluster of two control-plane nodes and a worker at
// v1.35.4, with kubeadm-config and both addons.
func planCluster() []runtime.Object {
	node := func(name, kubelet string, cp bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if cp {
			n.Labels["node-role.kubernetes.io/control-plane"] = ""
		}
		n.Status.NodeInfo.KubeletVersion = kubelet
		return n
	}
	pod := func(component, node, image string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: component + "-" + node, Namespace: "kube-system", Labels: map[string]string{"component": component}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: component, Image: image}}}}
	}
	objs := []runtime.Object{
		node("node1", "v1.35.4", true), node("node2", "v1.35.4", true), node("worker1", "v1.35.4", false),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kubeadm-config", Namespace: "kube-system"}, Data: map[string]string{"ClusterConfiguration": "kind: ClusterConfiguration\nkubernetesVersion: v1.35.4\n"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system"},
			Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Image: "registry.k8s.io/coredns/coredns:v1.13.1"}}}}}},
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"},
			Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Image: "registry.k8s.io/kube-proxy:v1.35.4"}}}}}},
	}
	for _, n := range []string{"node1", "node2"} {
		objs = append(objs, pod("kube-apiserver", n, "registry.k8s.io/kube-apiserver:v1.35.4"), pod("etcd", n, "registry.k8s.io/etcd:3.6.8-0"),
			pod("kube-controller-manager", n, "registry.k8s.io/kube-controller-manager:v1.35.4"), pod("kube-scheduler", n, "registry.k8s.io/kube-scheduler:v1.35.4"))
	}
	return objs
}

// TestPlanUpgrade: the plan of a v1.35.4 cluster to v1.36.3 names each
// node's components as they run and as they will (etcd stays), the
// addons, and the steps in order, this node first; a jump of two minors, a
// downgrade across minors, a version kubeboot does not parse and a target
// older than a kubelet are refused.
func TestPlanUpgrade(t *testing.T) {
	s := phasestest.NewNode(t, t.TempDir(), "v1.36.3")
	client := fake.NewClientset(planCluster()...)
	plan, err := PlanUpgrade(context.Background(), s.Run, client, s.Config)
	must(t, err)
	if plan.ClusterVersion != "v1.35.4" || plan.Target != "v1.36.3" || len(plan.Nodes) != 3 || plan.Nodes[2].Name != "worker1" || plan.Nodes[2].ControlPlane {
		t.Fatalf("plan %+v", plan)
	}
	got := map[string]Change{}
	for _, c := range plan.Nodes[0].Components {
		got[c.Name] = c
	}
	for name, want := range map[string]string{
		"kubelet": "v1.35.4", "kube-apiserver": "registry.k8s.io/kube-apiserver:v1.36.3", "etcd": "registry.k8s.io/etcd:3.6.8-0",
		"kube-controller-manager": "registry.k8s.io/kube-controller-manager:v1.36.3", "kube-scheduler": "registry.k8s.io/kube-scheduler:v1.36.3",
	} {
		if got[name].To != want {
			t.Errorf("node1's %s: %+v, want to %s", name, got[name], want)
		}
	}
	if len(plan.Addons) != 2 || plan.Addons[0].To != config.DefaultCoreDNSImage("registry.k8s.io", "v1.36.3") || plan.Addons[1].To != "registry.k8s.io/kube-proxy:v1.36.3" {
		t.Errorf("addons %+v", plan.Addons)
	}
	steps := strings.Join(plan.Steps, "\n")
	want := []string{
		"on node1: install the kubelet v1.36.3, then kubeboot upgrade apply --config",
		"on node2: install the kubelet v1.36.3, then kubeboot upgrade node --config <its configuration at v1.36.3>",
		"on worker1: install the kubelet v1.36.3, then kubeboot upgrade node --config <its WorkerConfiguration> (on a worker `kubeadm join` joined: kubeadm upgrade node, then restart the kubelet)",
	}
	if len(plan.Steps) != len(want) || !strings.HasPrefix(plan.Steps[0], want[0]) || plan.Steps[1] != want[1] || plan.Steps[2] != want[2] {
		t.Errorf("steps:\n%s", steps)
	}

	for _, tc := range []struct{ target, want string }{
		{"v1.37.0", "unsupported: kubeboot supports v1.34 to v1.36"},
		{"v1.34.2", "downgrades across minor versions are not supported"},
		{"latest", "want a release version like v1.36.3"},
		{"v1.36.3+evil", "without pre-release, build metadata or spaces"},
		{"v1.36.3 ", "without pre-release, build metadata or spaces"},
	} {
		s.Config.KubernetesVersion = tc.target
		if _, err := PlanUpgrade(context.Background(), s.Run, client, s.Config); exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("plan to %s: %v, want exit 2 and %q", tc.target, err, tc.want)
		}
	}
	s.Config.KubernetesVersion = "v1.35.2"
	if _, err := PlanUpgrade(context.Background(), s.Run, client, s.Config); exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), "newer than the control plane may be") {
		t.Errorf("plan to a release older than the kubelets: %v", err)
	}
}

// TestPlanSkew: a target two minors above an API server is refused, and
// so is one more than three minors above a kubelet, naming the node, as
// kubeadm's upgrade refuses it; three minors are allowed.
func TestPlanSkew(t *testing.T) {
	for _, tc := range []struct{ node, apiserver, kubelet, want string }{
		{"worker1", "", "v1.33.9", ""},
		{"worker1", "", "v1.32.5", "upgrade to v1.36.3: the kubelet Node worker1 reports is v1.32.5, more than 3 minor versions older than the control plane this upgrade brings (v1.36.3): install the kubelet of v1.33 or later, on worker1 before this upgrade"},
		{"node2", "v1.34.2", "", "upgrade one minor version at a time (to v1.35 first)"},
	} {
		objs := planCluster()
		for _, o := range objs {
			switch o := o.(type) {
			case *corev1.Node:
				if o.Name == tc.node && tc.kubelet != "" {
					o.Status.NodeInfo.KubeletVersion = tc.kubelet
				}
			case *corev1.Pod:
				if o.Spec.NodeName == tc.node && o.Labels["component"] == "kube-apiserver" && tc.apiserver != "" {
					o.Spec.Containers[0].Image = "registry.k8s.io/kube-apiserver:" + tc.apiserver
				}
			}
		}
		s := phasestest.NewNode(t, t.TempDir(), "v1.36.3")
		_, err := PlanUpgrade(context.Background(), s.Run, fake.NewClientset(objs...), s.Config)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc, err)
		case tc.want != "" && (exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want exit 2 and %q", tc, err, tc.want)
		}
	}
}
