package worker

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
	"github.com/kubeboot/kubeboot/templates"
)

// upgradingWorker is worker1, joined, its kubelet of v1.35.4 run by
// systemd while the binary on the PATH is v1.36.3 (FakeSystemd's), in a
// cluster whose answering API server runs server and whose kubeadm-config
// names cluster. A restart of kubelet.service makes the Node report the
// new release, Ready, with a new heartbeat. It returns the systemctl calls.
func upgradingWorker(t *testing.T, server, cluster string) (*workerNode, *[]string) {
	t.Helper()
	node := nodeObject(true)
	node.Status.NodeInfo.KubeletVersion = "v1.35.4"
	kubeadmConfig := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: templates.KubeadmConfigName, Namespace: metav1.NamespaceSystem},
		Data: map[string]string{templates.KubeadmConfigKey: "kind: ClusterConfiguration\nkubernetesVersion: " + cluster + "\n"}}
	n := newWorker(t, kubeletConfigMap(t), kubeadmConfig, node)
	n.writeKubeletConf(t, n.ca, "worker1")
	n.client.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: server}
	n.s.API = nil // upgrade node talks as the kubelet, not with a token
	n.s.KubeletClient = func(string) (kubernetes.Interface, error) { return n.client, nil }
	must(t, os.MkdirAll(n.host(phases.SystemdRunDir), 0o755))
	state := "active"
	sys, calls := phasestest.FakeSystemd(&state)
	systemctl := sys.Systemctl
	sys.Systemctl = func(ctx context.Context, args ...string) ([]byte, error) {
		out, err := systemctl(ctx, args...)
		if args[0] == "restart" {
			node.Status.NodeInfo.KubeletVersion = config.DefaultKubernetesVersion
			node.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
			_, err = n.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		}
		return out, err
	}
	n.s.System = sys
	return n, calls
}

// TestWorkerUpgrade: upgrade node on a worker writes the kubelet's
// configuration from the cluster's kubelet-config with the node's
// settings, restarts kubelet.service and waits for the Node to report the
// new kubelet, asking again an API server that fails its first answer; a
// re-run restarts nothing.
func TestWorkerUpgrade(t *testing.T) {
	n, calls := upgradingWorker(t, "v1.36.3", "v1.36.3")
	// The API server behind the endpoint, just upgraded, fails its first
	// answer: it is asked again.
	failed := false
	n.client.PrependReactor("get", "version", func(clienttesting.Action) (bool, runtime.Object, error) {
		if failed {
			return false, nil, nil
		}
		failed = true
		return true, nil, apierrors.NewServiceUnavailable("starting")
	})
	if _, err := Upgrade(0).Execute(context.Background(), n.s); err != nil {
		t.Fatalf("upgrade node: %v\n%s", err, n.out)
	}
	// The kubelet is read once, before the upgrade (phases.ReadKubelet).
	if diff := cmp.Diff([]string{"is-active kubelet", "restart kubelet"}, *calls); diff != "" {
		t.Errorf("systemctl calls (-want +got):\n%s", diff)
	}
	kubeletConfig := string(phasestest.HostFile(t, n.s, n.w.Kubelet.ConfigFile))
	if !strings.Contains(kubeletConfig, "staticPodPath: /etc/kubernetes/manifests") || !strings.Contains(kubeletConfig, "failSwapOn: false") {
		t.Errorf("the kubelet's configuration is not the cluster's with this node's settings:\n%s", kubeletConfig)
	}
	if !strings.Contains(n.out.String(), "Node worker1 is Ready with the kubelet "+config.DefaultKubernetesVersion) {
		t.Errorf("output:\n%s", n.out)
	}

	// A new run: nothing written yet.
	*calls = nil
	n.out.Reset()
	n.s.Files = &files.AtomicWriter{Root: n.host("/")}
	if _, err := Upgrade(0).Execute(context.Background(), n.s); err != nil {
		t.Fatalf("upgrade node again: %v\n%s", err, n.out)
	}
	if len(*calls) != 1 || !strings.Contains(n.out.String(), "the kubelet runs v1.36.3, its binary's release, and /var/lib/kubelet/config.yaml is unchanged: left running") {
		t.Errorf("a re-run on an upgraded worker: systemctl %v\n%s", *calls, n.out)
	}
}

// TestWorkerUpgradeRefusesSkew: a kubelet newer than the answering API
// server or than the cluster's release, or more than three minors older
// than the API server, is refused before anything is written or
// restarted; so is a worker that has not joined.
func TestWorkerUpgradeRefusesSkew(t *testing.T) {
	for _, tc := range []struct{ server, cluster, want string }{
		{"v1.35.4", "v1.36.3", "newer than the API server at v1.35.4 (v1.35.4): a kubelet is never newer than the API server; upgrade the control plane first, or install the kubelet of v1.35"},
		{"v1.36.3", "v1.35.4", "newer than the cluster's release in kube-system/kubeadm-config (v1.35.4)"},
		{"v1.40.0", "v1.40.0", "more than 3 minor versions older than the API server at v1.40.0 (v1.40.0): install the kubelet of v1.37 or later"},
	} {
		n, calls := upgradingWorker(t, tc.server, tc.cluster)
		before := phasestest.Snapshot(t, n.host("/"))
		_, err := Upgrade(0).Execute(context.Background(), n.s)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("API server %s, cluster %s: %v, want %q", tc.server, tc.cluster, err, tc.want)
		}
		if after := phasestest.Snapshot(t, n.host("/")); !cmp.Equal(before, after) || len(*calls) != 1 {
			t.Errorf("a refused upgrade ran systemctl %v or changed files: %s", *calls, cmp.Diff(before, after))
		}
	}

	n, calls := upgradingWorker(t, "v1.36.3", "v1.36.3")
	must(t, os.Remove(n.host(n.w.KubeconfigPath(config.KubeconfigKubelet))))
	if _, err := Upgrade(0).Execute(context.Background(), n.s); err == nil || !strings.Contains(err.Error(), "/etc/kubernetes/kubelet.conf is missing: this worker has not joined; run `kubeboot join` first") || len(*calls) > 0 {
		t.Errorf("upgrade node on a worker that has not joined: %v, systemctl %v", err, *calls)
	}
}
