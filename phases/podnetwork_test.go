package phases

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
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
