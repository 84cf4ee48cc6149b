package phases

import (
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/templates"
)

// TestCheckPodNetwork: upgrade apply may add flannel to a cluster that
// runs it, or whose nodes wait for a network, but not to one whose Ready
// nodes show another pod network; provider none is never refused.
func TestCheckPodNetwork(t *testing.T) {
	node := func(ready corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
	}
	flannel := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel", Namespace: "kube-system"}}
	for _, tt := range []struct {
		name     string
		provider string
		objs     []runtime.Object
		refused  bool
	}{
		{"flannel runs", config.CNIFlannel, []runtime.Object{flannel, node(corev1.ConditionTrue)}, false},
		{"nodes wait for a network", config.CNIFlannel, []runtime.Object{node(corev1.ConditionFalse)}, false},
		{"another pod network", config.CNIFlannel, []runtime.Object{node(corev1.ConditionTrue)}, true},
		{"provider none", config.CNINone, []runtime.Object{node(corev1.ConditionTrue)}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, _, _ := liveState(t, false, tt.objs...)
			s.Config.Addons.CNI.Provider = tt.provider
			err := CheckPodNetwork(context.Background(), s)
			switch {
			case !tt.refused && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.refused && (exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), "no DaemonSet kube-system/kube-flannel and Node node1 is Ready") ||
				!strings.Contains(err.Error(), "Set addons.cni.provider: none")):
				t.Fatalf("got %v, want exit 2 naming the Ready node and the fix", err)
			}
		})
	}
}

// TestResetPodNetwork: with kubeboot's flannel configuration on the node,
// reset deletes the pod network's interfaces and removes the address
// records, flanneld's subnet file and the configuration, and nothing
// else; a dry run changes nothing; another pod network's configuration
// leaves everything, and says how to clean up.
func TestResetPodNetwork(t *testing.T) {
	theirs := []string{"/etc/cni/net.d/99-theirs.conflist", "/var/lib/cni/networks/theirs/10.0.0.2", "/run/flannel/theirs"}
	ours := []string{templates.FlannelIPAMDir + "/10.244.1.5", templates.FlannelIPAMDir + "/last_reserved_ip.0", templates.FlannelSubnetFile}
	setup := func(t *testing.T, conf string) (*workflow.Run, string, map[string]bool) {
		root := t.TempDir()
		links := map[string]bool{"cni0": true, "flannel.1": true, "eth0": true}
		run := &workflow.Run{Files: &files.AtomicWriter{Root: root}, Report: output.NewReporter(io.Discard, false),
			System: workflow.System{DeleteLink: func(name string) (bool, error) {
				had := links[name]
				delete(links, name)
				return had, nil
			}}}
		for _, p := range append(slices.Clone(theirs), ours...) {
			writeHostFile(t, &Node{Run: run}, p, "data")
		}
		writeHostFile(t, &Node{Run: run}, templates.FlannelCNIConfPath, conf)
		return run, root, links
	}
	exists := func(root, path string) bool {
		_, err := os.Lstat(filepath.Join(root, path))
		return err == nil
	}

	t.Run("kubeboot's", func(t *testing.T) {
		run, root, links := setup(t, templates.FlannelCNIConfig)
		removed, left, err := ResetPodNetwork(run)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{templates.FlannelIPAMDir, templates.FlannelSubnetFile, templates.FlannelCNIConfPath}; !slices.Equal(removed, want) || len(left) > 0 {
			t.Errorf("removed %v, left %v; want removed %v", removed, left, want)
		}
		if !maps.Equal(links, map[string]bool{"eth0": true}) {
			t.Errorf("interfaces left: %v, want eth0 alone", links)
		}
		for _, p := range append(ours, templates.FlannelCNIConfPath) {
			if exists(root, p) {
				t.Errorf("%s is still there", p)
			}
		}
		for _, p := range theirs {
			if !exists(root, p) {
				t.Errorf("reset removed %s, not kubeboot's", p)
			}
		}
		// Again: nothing of kubeboot's pod network is left to remove.
		if removed, left, err := ResetPodNetwork(run); err != nil || len(removed) > 0 || len(left) != 1 || !strings.Contains(left[0], "no pod network of kubeboot's") {
			t.Errorf("a re-run: removed %v, left %v, %v", removed, left, err)
		}
	})

	t.Run("a dry run", func(t *testing.T) {
		run, root, links := setup(t, templates.FlannelCNIConfig)
		var out strings.Builder
		run.Report = output.NewReporter(&out, false)
		run.Files = &files.DryRunWriter{Root: root, Report: run.Report, Stdout: io.Discard}
		run.Options.DryRun = true
		removed, _, err := ResetPodNetwork(run)
		if err != nil {
			t.Fatal(err)
		}
		if len(removed) != 3 || len(links) != 3 || !exists(root, templates.FlannelCNIConfPath) || !exists(root, templates.FlannelSubnetFile) {
			t.Errorf("a dry run changed the node: removed %v, interfaces %v", removed, links)
		}
		if !strings.Contains(out.String(), "would delete the network interface cni0") {
			t.Errorf("a dry run does not say what it would delete:\n%s", out.String())
		}
	})

	t.Run("another machine's files", func(t *testing.T) {
		run, root, links := setup(t, templates.FlannelCNIConfig)
		run.Options.Offline = true
		removed, left, err := ResetPodNetwork(run)
		if err != nil || len(removed) != 3 || exists(root, templates.FlannelCNIConfPath) {
			t.Errorf("removed %v, %v; want the files removed", removed, err)
		}
		if len(links) != 3 || len(left) != len(templates.FlannelLinks()) || !strings.Contains(left[0], "ip link delete cni0") {
			t.Errorf("interfaces %v, left %v; want this machine's kept, and said", links, left)
		}
	})

	t.Run("another's", func(t *testing.T) {
		run, root, links := setup(t, strings.Replace(templates.FlannelCNIConfig, "portmap", "bandwidth", 1))
		removed, left, err := ResetPodNetwork(run)
		if err != nil || len(removed) > 0 || len(links) != 3 {
			t.Errorf("removed %v, interfaces %v, %v; want nothing touched", removed, links, err)
		}
		for _, p := range append(ours, templates.FlannelCNIConfPath) {
			if !exists(root, p) {
				t.Errorf("reset removed %s of another pod network", p)
			}
		}
		if len(left) != 1 || !strings.Contains(left[0], "not the one kubeboot's flannel writes") || !strings.Contains(left[0], "ip link delete cni0") {
			t.Errorf("left %v, want it to say the pod network is not kubeboot's and how to clean up", left)
		}
	})

	t.Run("an interface that cannot be deleted", func(t *testing.T) {
		run, root, _ := setup(t, templates.FlannelCNIConfig)
		run.System.DeleteLink = func(string) (bool, error) { return false, errors.New("operation not permitted") }
		if _, _, err := ResetPodNetwork(run); err == nil || !exists(root, templates.FlannelCNIConfPath) {
			t.Errorf("got %v, want the error, with the configuration kept for a re-run", err)
		}
	})
}
