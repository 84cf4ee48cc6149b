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
