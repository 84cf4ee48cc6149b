package phases_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

// TestCheckKubeletSkew: a kubelet may be at the API server's minor or up
// to three below it, never above, whatever the patch releases; a refusal
// names the kubelet and the API server as the caller does.
func TestCheckKubeletSkew(t *testing.T) {
	for _, tc := range []struct {
		kubelet, apiserver string
		ok                 bool
	}{
		{"v1.36.3", "v1.36.3", true},
		{"v1.36.9", "v1.36.0", true},
		{"v1.33.0", "v1.36.3", true},
		{"v1.32.9", "v1.36.3", false},
		{"v1.37.0", "v1.36.3", false},
		{"v2.36.0", "v1.36.3", false},
	} {
		err := phases.CheckKubeletSkew("the kubelet Node w1 reports", version.MustParseSemantic(tc.kubelet), "the API server", version.MustParseSemantic(tc.apiserver))
		if (err == nil) != tc.ok {
			t.Errorf("kubelet %s beside the API server %s: %v, want allowed %v", tc.kubelet, tc.apiserver, err, tc.ok)
		}
		if want := "the kubelet Node w1 reports is " + tc.kubelet + ", "; err != nil && (!strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "the API server ("+tc.apiserver+")")) {
			t.Errorf("kubelet %s beside the API server %s: %q, want it to start with %q and name the API server", tc.kubelet, tc.apiserver, err, want)
		}
	}
}

// TestUpgradeKubelet: beside a kubelet systemd does not run it changes
// nothing and says so; with systemd, a kubelet that runs its binary's
// release with an unchanged configuration is left running, with neither
// systemctl nor a request (the kubelet as read before the upgrade holds);
// a restarted kubelet whose Node never reports the new release fails the
// wait, naming what the Node reports.
func TestUpgradeKubelet(t *testing.T) {
	var out bytes.Buffer
	run := phasestest.NewRun(t.TempDir(), output.NewReporter(&out, false))
	state := "active"
	sys, calls := phasestest.FakeSystemd(&state)
	run.System = sys
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.35.4"}}}
	client := fake.NewClientset(node)
	ctx := context.Background()
	read := func(t *testing.T) phases.Kubelet {
		t.Helper()
		k, err := phases.ReadKubelet(ctx, run, client, "node1")
		if err != nil {
			t.Fatal(err)
		}
		*calls = nil
		client.ClearActions()
		return k
	}
	if err := phases.UpgradeKubelet(ctx, run, client, read(t), "node1", "/var/lib/kubelet/config.yaml", time.Second); err != nil || len(*calls) > 0 ||
		!strings.Contains(out.String(), "kubelet.service does not run this node's kubelet: restart the kubelet yourself") {
		t.Errorf("without systemd: %v, systemctl %v\n%s", err, *calls, out.String())
	}
	if err := os.MkdirAll(run.Files.HostPath(phases.SystemdRunDir), 0o755); err != nil {
		t.Fatal(err)
	}
	current := node.DeepCopy()
	current.Status.NodeInfo.KubeletVersion = "v1.36.3"
	if err := phases.UpgradeKubelet(ctx, run, client, phases.Kubelet{Systemd: true, Node: current, Release: version.MustParseSemantic("v1.36.3")}, "node1", "/var/lib/kubelet/config.yaml", time.Second); err != nil ||
		len(*calls) > 0 || len(client.Actions()) > 0 || !strings.Contains(out.String(), "left running") {
		t.Errorf("a kubelet of its binary's release: %v, systemctl %v, requests %v\n%s", err, *calls, client.Actions(), out.String())
	}
	err := phases.UpgradeKubelet(ctx, run, client, read(t), "node1", "/var/lib/kubelet/config.yaml", 2*time.Second)
	if want := "wait for Node node1 to report the kubelet v1.36.3 after its restart: it reports v1.35.4"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a kubelet that never reports the new release: %v, want %q", err, want)
	}
	if !strings.Contains(strings.Join(*calls, ","), "restart kubelet") {
		t.Errorf("systemctl calls %v: no restart", *calls)
	}
}

// TestKubeletReleaseFromTheNode: the kubelet binary on the PATH is asked
// its release (which starts it) unless the kubelet that reported the
// Node's status runs that very file: a process runs it, and the Node's
// Ready heartbeat came after that process started. Then the Node's
// release is the binary's.
func TestKubeletReleaseFromTheNode(t *testing.T) {
	started := time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)
	node := func(heartbeat time.Time) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.35.4"},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(heartbeat)}},
		}}
	}
	for _, tc := range []struct {
		name    string
		running bool
		node    *corev1.Node
		want    string
		asked   bool
	}{
		{"no Node", true, nil, "1.36.3", true},
		{"reported since the running file started", true, node(started.Add(2 * time.Second)), "1.35.4", false},
		{"reported before it started", true, node(started.Add(-time.Second)), "1.36.3", true},
		{"no process runs the file", false, node(started.Add(2 * time.Second)), "1.36.3", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := "active"
			run := phasestest.NewRun(t.TempDir(), output.NewReporter(&bytes.Buffer{}, false))
			run.System, _ = phasestest.FakeSystemd(&state) // the binary is v1.36.3
			asked := false
			version := run.System.Version
			run.System.Version = func(ctx context.Context, path string) (string, error) {
				asked = true
				return version(ctx, path)
			}
			run.System.RunningSince = func(path string) (time.Time, bool) {
				if path != "/usr/bin/kubelet" {
					t.Errorf("RunningSince(%q), want the kubelet on the PATH", path)
				}
				return started, tc.running
			}
			got, err := phases.KubeletRelease(t.Context(), run, tc.node)
			if err != nil || got.String() != tc.want || asked != tc.asked {
				t.Errorf("KubeletRelease = %v, %v (binary asked: %v); want %s (asked: %v)", got, err, asked, tc.want, tc.asked)
			}
		})
	}
}
