package phases

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/templates"
)

func TestAddonPhase(t *testing.T) {
	s, client, out := liveState(t, false)
	s.Config.Networking.PodSubnet = "10.244.0.0/16"
	ctx := context.Background()
	ran, err := workflow.Runner[*Node]{Phases: []workflow.Phase[*Node]{Addon}}.Run(ctx, s, nil)
	must(t, err)
	if strings.Join(ran, ",") != "addon/cni,addon/coredns,addon/kube-proxy,addon/manifests" {
		t.Errorf("ran %v", ran)
	}
	svc, err := client.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	must(t, err)
	kubelet, err := ClusterKubeletConfiguration(s.Config)
	must(t, err)
	var kc struct {
		ClusterDNS []string `json:"clusterDNS"`
	}
	must(t, yaml.Unmarshal(kubelet, &kc))
	if len(kc.ClusterDNS) != 1 || svc.Spec.ClusterIP != kc.ClusterDNS[0] {
		t.Errorf("kube-dns is at %q, the kubelets' clusterDNS is %v", svc.Spec.ClusterIP, kc.ClusterDNS)
	}
	deploy, err := client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	must(t, err)
	if *deploy.Spec.Replicas != 2 || deploy.Spec.Template.Spec.Containers[0].Image != "registry.k8s.io/coredns/coredns:v1.14.2" {
		t.Errorf("coredns: %d replicas of %s", *deploy.Spec.Replicas, deploy.Spec.Template.Spec.Containers[0].Image)
	}
	proxy, err := client.CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	must(t, err)
	var proxyConfig map[string]any
	must(t, yaml.Unmarshal([]byte(proxy.Data["config.conf"]), &proxyConfig))
	if proxyConfig["mode"] != "nftables" || proxyConfig["clusterCIDR"] != "10.244.0.0/16" {
		t.Errorf("kube-proxy's config.conf: %v", proxyConfig)
	}
	flannel, err := client.CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-flannel-cfg", metav1.GetOptions{})
	must(t, err)
	var netConf map[string]any
	must(t, yaml.Unmarshal([]byte(flannel.Data["net-conf.json"]), &netConf))
	if netConf["Network"] != "10.244.0.0/16" || netConf["EnableNFTables"] != true {
		t.Errorf("flannel's net-conf.json: %v", netConf)
	}
	for _, line := range []string{"[addon/coredns] Deployment kube-system/coredns created", "[addon/kube-proxy] DaemonSet kube-system/kube-proxy created",
		"[addon/cni] DaemonSet kube-system/kube-flannel created", "[addon/cni] ClusterRole flannel created",
		"[addon/cni] DaemonSet kube-system/kubeboot-network-policy created", "[addon/cni] ClusterRole kubeboot-network-policy created",
		"[addon/coredns] ServiceAccount kube-system/coredns created", "[addon/kube-proxy] ClusterRoleBinding kubeadm:node-proxier created"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("output lacks %q:\n%s", line, out)
		}
	}
	rerunChangesNothing(t, s, client, AddonCNI)
	rerunChangesNothing(t, s, client, AddonCoreDNS)
	rerunChangesNothing(t, s, client, AddonKubeProxy)

	// Someone scales CoreDNS: the apply takes it back.
	deploy.Spec.Replicas = new(int32(5))
	_, err = client.AppsV1().Deployments("kube-system").Update(ctx, deploy, metav1.UpdateOptions{FieldManager: "kubectl-scale"})
	must(t, err)
	must(t, AddonCoreDNS.Run(ctx, s))
	deploy, err = client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	must(t, err)
	if *deploy.Spec.Replicas != 2 {
		t.Errorf("after a re-run coredns has %d replicas, want 2", *deploy.Spec.Replicas)
	}
}

func TestAddonsTurnedOff(t *testing.T) {
	s, client, out := liveState(t, false)
	s.Config.Addons.CoreDNS.Disabled = true
	s.Config.Addons.KubeProxy.Disabled = true
	s.Config.Addons.CNI = config.CNI{Provider: config.CNINone}
	_, err := workflow.Runner[*Node]{Phases: []workflow.Phase[*Node]{Addon}}.Run(context.Background(), s, nil)
	must(t, err)
	if objs := objects(t, client); len(objs) != 0 {
		t.Errorf("turned-off addons made objects: %v", objs)
	}
	for _, line := range []string{"addons.coreDNS.disabled", "addons.kubeProxy.disabled", "addons.cni.provider: none"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("output does not say %q:\n%s", line, out)
		}
	}
	out.Reset()
	if err := WaitAddonsRolledOut(context.Background(), s, time.Second, nil); err != nil || out.Len() > 0 {
		t.Errorf("turned-off addons are waited for: %v, %q", err, out)
	}
}

func TestWaitAddonsRolledOut(t *testing.T) {
	rolledOut := func() []runtime.Object {
		return []runtime.Object{
			&appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system", Generation: 2},
				Spec:       appsv1.DeploymentSpec{Replicas: new(int32(2))},
				Status:     appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2},
			},
			&appsv1.DaemonSet{
				ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system", Generation: 3},
				Status:     appsv1.DaemonSetStatus{ObservedGeneration: 3, DesiredNumberScheduled: 3, UpdatedNumberScheduled: 3, NumberAvailable: 3},
			},
			&appsv1.DaemonSet{
				ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel", Namespace: "kube-system", Generation: 1},
				Status:     appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 3, UpdatedNumberScheduled: 3, NumberAvailable: 3},
			},
			&appsv1.DaemonSet{
				ObjectMeta: metav1.ObjectMeta{Name: "kubeboot-network-policy", Namespace: "kube-system", Generation: 1},
				Status:     appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 3, UpdatedNumberScheduled: 3, NumberAvailable: 3},
			},
		}
	}
	tests := []struct {
		name   string
		modify func(d *appsv1.Deployment, ds *appsv1.DaemonSet)
		want   string // "" means rolled out
	}{
		{"rolled out", func(*appsv1.Deployment, *appsv1.DaemonSet) {}, ""},
		{"spec not seen", func(d *appsv1.Deployment, _ *appsv1.DaemonSet) { d.Status.ObservedGeneration = 1 }, "Deployment kube-system/coredns: the controller has not seen the current spec yet"},
		{"replicas not updated", func(d *appsv1.Deployment, _ *appsv1.DaemonSet) { d.Status.UpdatedReplicas = 1 }, "Deployment kube-system/coredns: 1 of 2 replicas updated"},
		{"old replica left", func(d *appsv1.Deployment, _ *appsv1.DaemonSet) { d.Status.Replicas = 3 }, "1 old replicas still running"},
		{"not available", func(d *appsv1.Deployment, _ *appsv1.DaemonSet) { d.Status.AvailableReplicas = 1 }, "1 of 2 updated replicas available"},
		{"node pods not updated", func(_ *appsv1.Deployment, ds *appsv1.DaemonSet) { ds.Status.UpdatedNumberScheduled = 2 }, "DaemonSet kube-system/kube-proxy: 2 of 3 nodes' pods updated"},
		{"node pods not available", func(_ *appsv1.Deployment, ds *appsv1.DaemonSet) { ds.Status.NumberAvailable = 0 }, "0 of 3 nodes' pods available"},
		{"pod network not available", func(*appsv1.Deployment, *appsv1.DaemonSet) {}, "DaemonSet kube-system/kube-flannel: 1 of 3 nodes' pods available"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := rolledOut()
			tt.modify(objs[0].(*appsv1.Deployment), objs[1].(*appsv1.DaemonSet))
			if tt.name == "pod network not available" {
				objs[2].(*appsv1.DaemonSet).Status.NumberAvailable = 1
			}
			s, _, out := liveState(t, false, objs...)
			err := WaitAddonsRolledOut(context.Background(), s, 1500*time.Millisecond, nil)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("rolled-out addons: %v", err)
			case tt.want == "" && !strings.Contains(out.String(), "addons rolled out"):
				t.Errorf("output does not say so:\n%s", out)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("got %v, want an error saying %q", err, tt.want)
			}
		})
	}
	// The workloads as their applies left them are judged before any is
	// read: rolled out there, none is read; not rolled out, each is read
	// at the next poll.
	t.Run("as applied", func(t *testing.T) {
		s, client, out := liveState(t, false)
		applied := &Workloads{}
		for _, o := range rolledOut() {
			applied.keep(o)
		}
		if err := WaitAddonsRolledOut(context.Background(), s, time.Second, applied); err != nil || !strings.Contains(out.String(), "addons rolled out") {
			t.Fatalf("rolled out as applied: %v\n%s", err, out)
		}
		if actions := client.Actions(); len(actions) > 0 {
			t.Errorf("the workloads as applied were read again: %v", actions)
		}
	})
	t.Run("as applied, then read", func(t *testing.T) {
		objs := rolledOut()
		s, client, _ := liveState(t, false, objs...)
		applied := &Workloads{}
		for _, o := range objs {
			o := o.DeepCopyObject()
			if d, ok := o.(*appsv1.Deployment); ok {
				d.Status.ObservedGeneration = 1 // the apply changed its spec
			}
			applied.keep(o)
		}
		if err := WaitAddonsRolledOut(context.Background(), s, 3*time.Second, applied); err != nil {
			t.Fatalf("rolled out at the second look: %v", err)
		}
		if actions := client.Actions(); len(actions) != len(objs) {
			t.Errorf("want each workload read once, at the second look; got %v", actions)
		}
	})
	t.Run("missing", func(t *testing.T) {
		s, _, _ := liveState(t, false)
		if err := WaitAddonsRolledOut(context.Background(), s, time.Second, nil); err == nil || !strings.Contains(err.Error(), `deployments.apps "coredns" not found`) {
			t.Errorf("got %v, want the missing Deployment named", err)
		}
	})
}

func TestControlPlanesBehind(t *testing.T) {
	apiserver := func(node, image string) runtime.Object {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-" + node, Namespace: "kube-system", Labels: map[string]string{"component": "kube-apiserver"}},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "kube-apiserver", Image: image}}},
		}
	}
	const current, older = "registry.k8s.io/kube-apiserver:v1.36.3", "registry.k8s.io/kube-apiserver:v1.35.4"
	// node1 is this node: its mirror pod may lag behind its manifest.
	s, _, _ := liveState(t, false, apiserver("node1", older), apiserver("node2", current), apiserver("node3", older))
	behind, err := ControlPlanesBehind(context.Background(), s)
	must(t, err)
	if strings.Join(behind, ",") != "node3 ("+older+")" {
		t.Errorf("behind: %v, want node3 only", behind)
	}
}

// TestAddonDrift: objects as the addon phase applies them show no drift;
// a changed Corefile shows as the ConfigMap's, a missing object as one to
// create, and a kube-dns at another cluster IP as one to replace. (The
// fake clientset does not honour dry runs: what the API server leaves
// unchanged is the end-to-end test's to show.)
func TestAddonDrift(t *testing.T) {
	s, client, _ := liveState(t, false)
	ctx := context.Background()
	_, err := workflow.Runner[*Node]{Phases: []workflow.Phase[*Node]{Addon}}.Run(ctx, s, nil)
	must(t, err)
	drifts, err := AddonDrift(ctx, s)
	must(t, err)
	if len(drifts) != 0 {
		t.Fatalf("converged addons drift: %+v", drifts)
	}
	cm, err := client.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	must(t, err)
	cm.Data["Corefile"] = ".:53 {\n    errors\n}\n"
	_, err = client.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"})
	must(t, err)
	must(t, client.RbacV1().ClusterRoleBindings().Delete(ctx, "kubeadm:node-proxier", metav1.DeleteOptions{}))
	svc, err := client.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	must(t, err)
	svc.Spec.ClusterIP = "10.96.0.53"
	_, err = client.CoreV1().Services("kube-system").Update(ctx, svc, metav1.UpdateOptions{})
	must(t, err)

	drifts, err = AddonDrift(ctx, s)
	must(t, err)
	got := map[string]Drift{}
	for _, d := range drifts {
		got[d.Object] = d
	}
	corefile := got["ConfigMap kube-system/coredns"]
	if !strings.Contains(string(corefile.Live), "errors") || !strings.Contains(string(corefile.Wanted), "kubernetes cluster.local") || corefile.Replace {
		t.Errorf("the Corefile's drift: %+v", corefile)
	}
	if d, ok := got["ClusterRoleBinding kubeadm:node-proxier"]; !ok || d.Live != nil || !strings.Contains(string(d.Wanted), "system:node-proxier") {
		t.Errorf("the deleted binding's drift: %+v", d)
	}
	if d := got["Service kube-system/kube-dns"]; !d.Replace || !strings.Contains(string(d.Wanted), "10.96.0.10") {
		t.Errorf("kube-dns at another IP: %+v", d)
	}
	if len(got) != 3 {
		t.Errorf("drifts of %d objects, want 3: %v", len(got), drifts)
	}
}

// TestJoinedKeepsEveryKind: joined keeps every object of every kind that
// templates.Objects holds, in the sets' order, so an addon of several
// sets applies them all; a kind added to Objects but not to joined fails
// here.
func TestJoinedKeepsEveryKind(t *testing.T) {
	var a, b templates.Objects
	for _, set := range []*templates.Objects{&a, &b} {
		v := reflect.ValueOf(set).Elem()
		for i := range v.NumField() {
			field := v.Field(i)
			elem := reflect.New(field.Type().Elem().Elem()) // a *Kind
			field.Set(reflect.Append(reflect.MakeSlice(field.Type(), 0, 1), elem))
		}
	}
	all := reflect.ValueOf(joined([]templates.Objects{a, b}))
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range all.NumField() {
		name := all.Type().Field(i).Name
		if got := all.Field(i); got.Len() != 2 || got.Index(0).Pointer() != va.Field(i).Index(0).Pointer() || got.Index(1).Pointer() != vb.Field(i).Index(0).Pointer() {
			t.Errorf("joined %s: %d objects, want the first set's then the second's", name, got.Len())
		}
	}
}
