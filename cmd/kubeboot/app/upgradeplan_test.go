package app

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/controlplane"
)

// TestUpgradePlan: upgrade plan reads the cluster through admin.conf's
// client and prints, as JSON or as a table, what an upgrade to the
// configuration's release (or VERSION, parsed as kubernetesVersion is)
// changes and the steps; a VERSION kubeboot does not render exits 2.
func TestUpgradePlan(t *testing.T) {
	n := newTokenNode(t)
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}}}
	node.Status.NodeInfo.KubeletVersion = "v1.35.4"
	apiserver := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-node1", Namespace: "kube-system", Labels: map[string]string{"component": "kube-apiserver"}},
		Spec: corev1.PodSpec{NodeName: "node1", Containers: []corev1.Container{{Name: "kube-apiserver", Image: "registry.k8s.io/kube-apiserver:v1.35.4"}}}}
	if _, err := n.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.client.CoreV1().Pods("kube-system").Create(ctx, apiserver, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := runCLIWith(t, n.deps, "upgrade", "plan", "--config", n.config, "-o", "json")
	var plan controlplane.UpgradePlan
	if code != 0 || json.Unmarshal([]byte(stdout), &plan) != nil {
		t.Fatalf("upgrade plan -o json: exit %d, %q, %s", code, stdout, stderr)
	}
	if plan.Target != config.DefaultKubernetesVersion || len(plan.Nodes) != 1 || len(plan.Nodes[0].Components) != 2 ||
		plan.Nodes[0].Components[1].To != "registry.k8s.io/kube-apiserver:"+config.DefaultKubernetesVersion {
		t.Errorf("plan %+v", plan)
	}
	code, stdout, _ = runCLIWith(t, n.deps, "upgrade", "plan", "--config", n.config)
	if code != 0 || !strings.Contains(stdout, "kube-apiserver") || !strings.Contains(stdout, "Steps, in order:\n1. on node1: install the kubelet "+config.DefaultKubernetesVersion+", then kubeboot upgrade apply") {
		t.Errorf("upgrade plan: exit %d:\n%s", code, stdout)
	}
	for _, target := range []string{"v1.38.0", "v1.36.3+evil", "v1.36.3 "} {
		code, _, stderr = runCLIWith(t, n.deps, "upgrade", "plan", target, "--config", n.config)
		if code != 2 || !strings.Contains(stderr, `upgrade plan VERSION "`+target+`": `) {
			t.Errorf("upgrade plan %q: exit %d, %s", target, code, stderr)
		}
	}
	code, stdout, stderr = runCLIWith(t, n.deps, "upgrade", "plan", strings.TrimPrefix(config.DefaultKubernetesVersion, "v"), "--config", n.config, "-o", "json")
	if code != 0 || json.Unmarshal([]byte(stdout), &plan) != nil || plan.Target != config.DefaultKubernetesVersion {
		t.Errorf("upgrade plan without the v: exit %d, %q, %s", code, stdout, stderr)
	}
}

// TestUpgradePlanFromAnAdminsMachine: with --kubeconfig, upgrade plan
// reads the configuration the cluster keeps in kube-system/kubeboot-config
// (its image repository is what the plan moves to) and names the first
// control-plane node for upgrade apply. A cluster without it, a missing
// kubeconfig and --config beside --kubeconfig are refused, each saying
// what to do.
func TestUpgradePlanFromAnAdminsMachine(t *testing.T) {
	n := newTokenNode(t)
	ctx := context.Background()
	kubeconfig := writeFile(t, t.TempDir(), "admin.conf", "apiVersion: v1\nkind: Config\n")
	for _, name := range []string{"cp-b", "cp-a"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}}}
		node.Status.NodeInfo.KubeletVersion = "v1.35.4"
		apiserver := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-" + name, Namespace: "kube-system", Labels: map[string]string{"component": "kube-apiserver"}},
			Spec: corev1.PodSpec{NodeName: name, Containers: []corev1.Container{{Name: "kube-apiserver", Image: "registry.example.com/k8s/kube-apiserver:v1.35.4"}}}}
		if _, err := n.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := n.client.CoreV1().Pods("kube-system").Create(ctx, apiserver, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	code, _, stderr := runCLIWith(t, n.deps, "upgrade", "plan", "v1.36.3", "--kubeconfig", kubeconfig)
	if code != 1 || !strings.Contains(stderr, "ConfigMap kube-system/kubeboot-config: the cluster has none") {
		t.Errorf("upgrade plan --kubeconfig of a cluster without kubeboot-config: exit %d, %s", code, stderr)
	}

	c := config.New()
	c.KubernetesVersion = "v1.35.4"
	c.ImageRepository = "registry.example.com/k8s"
	config.SetDefaults(c, config.Host{Name: "cp-b", Address: "10.0.0.12"})
	shared, err := c.Shared()
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kubeboot-config", Namespace: "kube-system"}, Data: map[string]string{"ClusterConfiguration": string(shared)}}
	if _, err := n.client.CoreV1().ConfigMaps("kube-system").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLIWith(t, n.deps, "upgrade", "plan", "v1.36.3", "--kubeconfig", kubeconfig, "-o", "json")
	var plan controlplane.UpgradePlan
	if code != 0 || json.Unmarshal([]byte(stdout), &plan) != nil {
		t.Fatalf("upgrade plan --kubeconfig -o json: exit %d, %q, %s", code, stdout, stderr)
	}
	if len(plan.Nodes) != 2 || plan.Nodes[0].Components[1].To != "registry.example.com/k8s/kube-apiserver:v1.36.3" ||
		len(plan.Steps) != 2 || !strings.HasPrefix(plan.Steps[0], "on cp-a: ") || !strings.Contains(plan.Steps[0], "upgrade apply") {
		t.Errorf("plan %+v, want cp-a's upgrade apply first and the kept image repository", plan)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--kubeconfig", kubeconfig, "--config", n.config}, "--config and --kubeconfig: give one"},
		{[]string{"--kubeconfig", kubeconfig + ".missing"}, "--kubeconfig: stat " + kubeconfig + ".missing"},
	} {
		code, _, stderr := runCLIWith(t, n.deps, append([]string{"upgrade", "plan"}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("upgrade plan %v: exit %d, %s; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}
