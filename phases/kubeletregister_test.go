package phases_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

// TestPromptRegistration: a kubelet that registered its Node and
// initialized its CSINode (the CSINode exists, whatever the Node's Ready
// condition says, or the Node is Ready) is left as it is. One that has not is restarted once,
// when systemd runs it and kubelet.service is active, and the run says
// why: at once when it has run past its quick CSINode tries, and half a
// second after its last quick try when it is younger, unless its CSINode
// exists by then. Otherwise nothing changes.
func TestPromptRegistration(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionFalse, Message: "container runtime network not ready: NetworkReady=false"}}}}
	pending := node.DeepCopy()
	pending.Status.Conditions[0].Message += `, failed to initialize CSINode: error updating CSINode annotation: timed out waiting for the condition; caused by: nodes "node1" not found`
	// How long the kubelet has been active.
	const young, old = 100 * time.Millisecond, 10 * time.Second
	const show = "show --property=ActiveEnterTimestampMonotonic --value kubelet"
	readyNode := node.DeepCopy()
	readyNode.Status.Conditions[0] = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue}
	csiNode := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node1"}}
	for _, tc := range []struct {
		name        string
		node        *corev1.Node
		csiNode     bool
		registers   func(*fake.Clientset) // 2 s into the grace
		systemd     bool
		state       string
		age         time.Duration
		want        []string
		restartedIn string
	}{
		{"registered", node, true, nil, true, "active", old, []string{}, ""},
		{"registered, its status not yet saying so", pending, true, nil, true, "active", old, []string{}, ""},
		{"Ready", readyNode, false, nil, true, "active", old, []string{}, ""},
		{"registered, CSINode pending", pending, false, nil, true, "active", young, []string{"is-active kubelet", show, "restart kubelet"}, "within 2."},
		{"registered, its status silent on the CSINode, none made", node, false, nil, true, "active", old, []string{"is-active kubelet", show, "restart kubelet"}, "and has run for over 2.5s"},
		{"late, the kubelet past its quick tries", nil, false, nil, true, "active", old, []string{"is-active kubelet", show, "restart kubelet"}, "and has run for over 2.5s"},
		{"late, the kubelet young", nil, false, nil, true, "active", young, []string{"is-active kubelet", show, "restart kubelet"}, "within 2."},
		{"late, the kubelet young, registers and makes its CSINode at its last quick try", nil, false, func(c *fake.Clientset) {
			_, _ = c.CoreV1().Nodes().Create(context.Background(), node.DeepCopy(), metav1.CreateOptions{})
			_, _ = c.StorageV1().CSINodes().Create(context.Background(), csiNode.DeepCopy(), metav1.CreateOptions{})
		}, true, "active", young, []string{"is-active kubelet", show}, ""},
		{"late, kubelet not active", nil, false, nil, true, "inactive", old, []string{"is-active kubelet"}, ""},
		{"late, no systemd", nil, false, nil, false, "active", old, []string{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, out := kubeletNode(t, t.TempDir(), 0)
			state := tc.state
			sys, calls := phasestest.FakeSystemd(&state)
			systemctl := sys.Systemctl
			sys.Systemctl = func(ctx context.Context, args ...string) ([]byte, error) {
				if args[0] == "show" {
					*calls = append(*calls, strings.Join(args, " "))
					// The kubelet's ActiveEnterTimestampMonotonic, in microseconds.
					var now unix.Timespec
					if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &now); err != nil {
						t.Fatal(err)
					}
					return []byte(strconv.FormatInt((now.Nano()-tc.age.Nanoseconds())/1000, 10) + "\n"), nil
				}
				return systemctl(ctx, args...)
			}
			s.System = sys
			if tc.systemd {
				if err := os.MkdirAll(s.Files.HostPath(phases.SystemdRunDir), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			var objects []runtime.Object
			if tc.node != nil {
				objects = append(objects, tc.node.DeepCopy())
			}
			if tc.csiNode {
				objects = append(objects, csiNode.DeepCopy())
			}
			client := fake.NewClientset(objects...)
			if tc.registers != nil {
				go func() {
					time.Sleep(2 * time.Second)
					tc.registers(client)
				}()
			}
			if err := phases.PromptRegistration(t.Context(), s.Base(), client, "node1"); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, *calls); diff != "" {
				t.Errorf("systemctl calls (-want +got):\n%s", diff)
			}
			restarted := strings.Contains(out.String(), "restarted kubelet.service: it reaches the API server, but had not registered Node node1 and initialized its CSINode")
			if restarted != (tc.restartedIn != "") || !strings.Contains(out.String(), tc.restartedIn) {
				t.Errorf("restarted %v, but the run says:\n%s", tc.restartedIn, out)
			}
		})
	}
}
