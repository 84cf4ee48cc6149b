package app

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/templates"
)

// TestUpgradeClusterCommand: upgrade cluster refuses bad flags and what
// upgrade plan refuses before it touches a node; then it upgrades in the
// plan's order, the first control-plane node's pod running upgrade apply
// with the install command the cluster's kubeboot-config names, and a
// pod that never ends fails at --node-timeout, its node uncordoned.
func TestUpgradeClusterCommand(t *testing.T) {
	n := newTokenNode(t)
	ctx := context.Background()
	kubeconfig := writeFile(t, t.TempDir(), "admin.conf", "apiVersion: v1\nkind: Config\n")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"1.36"}, 2, `upgrade cluster VERSION "1.36"`},
		{[]string{"v1.36.3", "--max-unavailable", "0"}, 2, "--max-unavailable 0: want 1 or more"},
		{[]string{"v1.36.3", "--kubeconfig", kubeconfig + ".missing"}, 2, "--kubeconfig: stat " + kubeconfig + ".missing"},
		{[]string{"v1.36.3"}, 1, "ConfigMap kube-system/kubeboot-config: the cluster has none"},
	} {
		args := append([]string{"upgrade", "cluster"}, tc.args...)
		if !slices.Contains(tc.args, "--kubeconfig") {
			args = append(args, "--kubeconfig", kubeconfig)
		}
		if code, _, stderr := runCLIWith(t, n.deps, args...); code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("upgrade cluster %v: exit %d, %s; want exit %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}

	for _, name := range []string{"w1", "cp1"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if name == "cp1" {
			node.Labels["node-role.kubernetes.io/control-plane"] = ""
		}
		node.Status.NodeInfo.KubeletVersion = "v1.34.2"
		if _, err := n.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	apiserver := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-cp1", Namespace: "kube-system", Labels: map[string]string{"component": "kube-apiserver"},
		Annotations: map[string]string{"kubernetes.io/config.mirror": "x"}},
		Spec: corev1.PodSpec{NodeName: "cp1", Containers: []corev1.Container{{Name: "kube-apiserver", Image: "registry.k8s.io/kube-apiserver:v1.34.2"}}}}
	if _, err := n.client.CoreV1().Pods("kube-system").Create(ctx, apiserver, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := config.New()
	c.KubernetesVersion = "v1.35.4"
	c.Kubelet.InstallCommand = []string{"/bin/sh", "-c", "apt-get install -y kubelet=${KUBERNETES_VERSION#v}-*"}
	config.SetDefaults(c, config.Host{Name: "cp1", Address: "10.0.0.11"})
	shared, err := c.Shared()
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kubeboot-config", Namespace: "kube-system"}, Data: map[string]string{"ClusterConfiguration": string(shared)}}
	if _, err := n.client.CoreV1().ConfigMaps("kube-system").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if code, _, stderr := runCLIWith(t, n.deps, "upgrade", "cluster", "v1.36.3", "--kubeconfig", kubeconfig); code != 2 || !strings.Contains(stderr, "upgrade one minor version at a time (to v1.35 first)") {
		t.Errorf("upgrade cluster two minors up: exit %d, %s", code, stderr)
	}
	if pods, _ := n.client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: templates.UpgradePodLabel}); len(pods.Items) != 0 {
		t.Fatalf("a refused upgrade made %d upgrade pods", len(pods.Items))
	}
	apiserver.Spec.Containers[0].Image = "registry.k8s.io/kube-apiserver:v1.35.4"
	if _, err := n.client.CoreV1().Pods("kube-system").Update(ctx, apiserver, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := runCLIWith(t, n.deps, "upgrade", "cluster", "v1.36.3", "--kubeconfig", kubeconfig, "--node-timeout", "300ms", "-o", "json")
	if code != 1 || !strings.Contains(stdout, `"msg":"upgrading to v1.36.3, in this order: cp1, w1"`) ||
		!strings.Contains(stdout, "the upgrade pod kube-system/kubeboot-upgrade-cp1 did not end within --node-timeout 300ms") {
		t.Fatalf("upgrade cluster: exit %d\n%s\n%s", code, stdout, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var last struct {
		Result struct {
			Version string `json:"version"`
			Nodes   []struct {
				Name    string `json:"name"`
				Outcome string `json:"outcome"`
			} `json:"nodes"`
			ExitCode int `json:"exitCode"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Result.ExitCode != 1 || len(last.Result.Nodes) != 2 ||
		last.Result.Nodes[0].Outcome != "failed" || last.Result.Nodes[1].Outcome != "" {
		t.Errorf("result %+v (%v)", last, err)
	}
	pod, err := n.client.CoreV1().Pods("kube-system").Get(ctx, "kubeboot-upgrade-cp1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--node-config", "/etc/kubeboot/node.yaml", "--kubernetes-version", "v1.36.3", "--apply", "--control-plane", "--", "/bin/sh", "-c", "apt-get install -y kubelet=${KUBERNETES_VERSION#v}-*"}
	if args := pod.Spec.Containers[0].Args; !slices.Equal(args, want) || pod.Spec.NodeName != "cp1" || pod.Spec.Containers[0].Image != c.CSRApprover.Image {
		t.Errorf("cp1's upgrade pod runs %s with %q on %s", pod.Spec.Containers[0].Image, pod.Spec.Containers[0].Args, pod.Spec.NodeName)
	}
	if node, _ := n.client.CoreV1().Nodes().Get(ctx, "cp1", metav1.GetOptions{}); node.Spec.Unschedulable {
		t.Error("cp1 is left cordoned")
	}
}

// TestUpgradeNodeKubernetesVersion: --kubernetes-version is for a
// control-plane node's file; a worker's names no release, and a version
// kubeboot cannot render is refused before the file is touched.
func TestUpgradeNodeKubernetesVersion(t *testing.T) {
	dir := t.TempDir()
	worker := writeFile(t, dir, "worker.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: WorkerConfiguration\nnode: {name: w1}\n")
	if code, _, stderr := runCLI(t, "upgrade", "node", "--config", worker, "--kubernetes-version", "v1.36.3"); code != 2 || !strings.Contains(stderr, worker+" is a worker's file, which names no release") {
		t.Errorf("upgrade node --kubernetes-version on a worker: exit %d, %s", code, stderr)
	}
	const file = "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nkubernetesVersion: v1.35.4\n"
	cluster := writeFile(t, dir, "cluster.yaml", file)
	if code, _, stderr := runCLI(t, "upgrade", "apply", "--config", cluster, "--kubernetes-version", "v2.0"); code != 2 || !strings.Contains(stderr, `--kubernetes-version "v2.0"`) {
		t.Errorf("upgrade apply --kubernetes-version v2.0: exit %d, %s", code, stderr)
	}
	if got, _ := os.ReadFile(cluster); string(got) != file {
		t.Errorf("the refused run changed the file:\n%s", got)
	}
}
