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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

// TestPromptRegistration: a kubelet that registered its Node and
// initialized its CSINode is left as it is. One that has not is
// restarted once, when systemd runs it and kubelet.service is active,
// and the run says why: at once when it has run past its quick CSINode
// tries, after the grace when it is younger, unless it registers within
// the grace. Otherwise nothing changes.
func TestPromptRegistration(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionFalse, Message: "container runtime network not ready: NetworkReady=false"}}}}
	pending := node.DeepCopy()
	pending.Status.Conditions[0].Message += `, failed to initialize CSINode: error updating CSINode annotation: timed out waiting for the condition; caused by: nodes "node1" not found`
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &now); err != nil {
		t.Fatal(err)
	}
	// The kubelet's ActiveEnterTimestampMonotonic, in microseconds.
	young := strconv.FormatInt(now.Nano()/1000-100_000, 10)
	old := strconv.FormatInt(now.Nano()/1000-10_000_000, 10)
	const show = "show --property=ActiveEnterTimestampMonotonic --value kubelet"
	for _, tc := range []struct {
		name        string
		node        *corev1.Node
		registers   bool // the Node registers 100 ms into the grace
		systemd     bool
		state, age  string
		want        []string
		restartedIn string
	}{
		{"registered", node, false, true, "active", old, []string{}, ""},
		{"registered, CSINode pending", pending, false, true, "active", young, []string{"is-active kubelet", show, "restart kubelet"}, "within 1s"},
		{"late, the kubelet past its quick tries", nil, false, true, "active", old, []string{"is-active kubelet", show, "restart kubelet"}, "and has run for over 2.5s"},
		{"late, the kubelet young", nil, false, true, "active", young, []string{"is-active kubelet", show, "restart kubelet"}, "within 1s"},
		{"late, the kubelet young, registers within the grace", nil, true, true, "active", young, []string{"is-active kubelet", show}, ""},
		{"late, kubelet not active", nil, false, true, "inactive", old, []string{"is-active kubelet"}, ""},
		{"late, no systemd", nil, false, false, "active", old, []string{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, out := kubeletNode(t, t.TempDir(), 0)
			state := tc.state
			sys, calls := phasestest.FakeSystemd(&state)
			systemctl := sys.Systemctl
			sys.Systemctl = func(ctx context.Context, args ...string) ([]byte, error) {
				if args[0] == "show" {
					*calls = append(*calls, strings.Join(args, " "))
					return []byte(tc.age + "\n"), nil
				}
				return systemctl(ctx, args...)
			}
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
			if tc.registers {
				go func() {
					time.Sleep(100 * time.Millisecond)
					_, _ = client.CoreV1().Nodes().Create(context.Background(), node.DeepCopy(), metav1.CreateOptions{})
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
