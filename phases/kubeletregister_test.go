package phases_test

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

// TestPromptRegistration: a kubelet that registered its Node and
// initialized its CSINode is left as it is; one that has not within the
// grace is restarted once, when
// systemd runs it and kubelet.service is active, and the run says why;
// otherwise nothing changes.
func TestPromptRegistration(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionFalse, Message: "container runtime network not ready: NetworkReady=false"}}}}
	pending := node.DeepCopy()
	pending.Status.Conditions[0].Message += `, failed to initialize CSINode: error updating CSINode annotation: timed out waiting for the condition; caused by: nodes "node1" not found`
	for _, tc := range []struct {
		name    string
		node    *corev1.Node
		systemd bool
		state   string
		want    []string
	}{
		{"registered", node, true, "active", []string{}},
		{"registered, CSINode pending", pending, true, "active", []string{"is-active kubelet", "restart kubelet"}},
		{"late", nil, true, "active", []string{"is-active kubelet", "restart kubelet"}},
		{"late, kubelet not active", nil, true, "inactive", []string{"is-active kubelet"}},
		{"late, no systemd", nil, false, "active", []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, out := kubeletNode(t, t.TempDir(), 0)
			state := tc.state
			sys, calls := phasestest.FakeSystemd(&state)
			s.System = sys
			if tc.systemd {
				if err := os.MkdirAll(s.Files.HostPath(phases.SystemdRunDir), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			client := fake.NewClientset()
			if tc.node != nil {
				client = fake.NewClientset(tc.node)
			}
			if err := phases.PromptRegistration(t.Context(), s.Base(), client, "node1"); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, *calls); diff != "" {
				t.Errorf("systemctl calls (-want +got):\n%s", diff)
			}
			told := strings.Contains(out.String(), "restarted kubelet.service: it reaches the API server, but had not registered Node node1 and initialized its CSINode within 1s")
			if restarted := len(tc.want) == 2; told != restarted {
				t.Errorf("restarted %v, but the run says:\n%s", restarted, out)
			}
		})
	}
}
