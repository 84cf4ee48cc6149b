package phases

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/internal/workflow"
)

// registerGrace is how long PromptRegistration gives a kubelet past its
// last quick try to initialize its CSINode before it restarts it.
const registerGrace = 500 * time.Millisecond

// csiNodeQuickTries is how long after its start the kubelet makes the
// quick tries of its CSINode's initialization (at 0, 0.03, 0.27 and
// 2.2 s); its next try is 15 s after the last of them.
const csiNodeQuickTries = 2500 * time.Millisecond

// csiNodePoll is how often PromptRegistration looks for the CSINode
// during the grace.
const csiNodePoll = 100 * time.Millisecond

// PromptRegistration restarts kubelet.service once when the kubelet has
// not registered the Node called name and initialized its CSINode, and
// would not for seconds. A kubelet that started before it could reach
// the API server (a control-plane node's, before its API server answered;
// a worker's, before the cluster signed its client certificate) retries
// its registration on a backoff that grows to 7 s, and its CSINode's
// initialization, which keeps the Node NotReady until it succeeds and
// fails until the Node exists, on one that jumps from 2 s to 15 s: the
// Node registers seconds late and turns Ready up to 15 s later still. A
// kubelet active for longer than csiNodeQuickTries is restarted at once
// (it made its quick tries already); a younger one, which may register
// before its last quick try and initialize its CSINode at it, is given
// until registerGrace after that try. A restarted kubelet reaches the API
// server at once, registers on its first tries and initializes its
// CSINode right after. Without systemd, or beside a kubelet.service that
// is not active, it changes nothing.
func PromptRegistration(ctx context.Context, s *workflow.Run, client kubernetes.Interface, name string) error {
	if csiNodeReady(ctx, client, name) {
		return nil
	}
	if _, err := os.Stat(s.Files.HostPath(SystemdRunDir)); err != nil {
		return nil
	}
	if out, err := s.System.Systemctl(ctx, "is-active", "kubelet"); err != nil || strings.TrimSpace(string(out)) != "active" {
		return nil
	}
	var grace time.Duration
	if age, err := activeFor(ctx, s.System, "kubelet"); err != nil || age <= csiNodeQuickTries {
		grace = registerGrace
		if err == nil {
			grace += csiNodeQuickTries - age
		}
	}
	if grace > 0 {
		err := wait.PollUntilContextTimeout(ctx, csiNodePoll, grace, false, func(ctx context.Context) (bool, error) {
			return csiNodeReady(ctx, client, name), nil
		})
		if err == nil || ctx.Err() != nil {
			return nil // initialized, or the caller's own wait ends on ctx and says so
		}
	}
	if err := systemctl(ctx, s.System, "restart", "kubelet"); err != nil {
		return err
	}
	why := fmt.Sprintf("within %s", grace.Round(100*time.Millisecond))
	if grace == 0 {
		why = fmt.Sprintf("and has run for over %s", csiNodeQuickTries)
	}
	s.Report.Infof("restarted kubelet.service: it reaches the API server, but had not registered Node %s and initialized its CSINode %s, and its next tries to register it, "+
		"then to initialize its CSINode (the Node is NotReady until then), were up to 7 s and 15 s away (the kubelet's backoffs); restarted, it makes them at once", name, why)
	return nil
}

// csiNodeReady says whether the kubelet registered the Node called name
// and initialized its CSINode: whether the CSINode exists, which the
// kubelet makes, owned by the Node, once the Node exists, or the Node is
// Ready, which it is not before. The message of the Node's Ready
// condition is not read: the kubelet says there that the CSINode is
// initialized only at its next status update, up to 10 s later.
func csiNodeReady(ctx context.Context, client kubernetes.Interface, name string) bool {
	if _, err := client.StorageV1().CSINodes().Get(ctx, name, metav1.GetOptions{}); err == nil {
		return true
	}
	n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	return err == nil && NodeReady(n)
}

// NodeReady says whether the Node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	return NodeReadyCondition(n).Status == corev1.ConditionTrue
}

// NodeReadyCondition is the Node's Ready condition, or a zero one.
func NodeReadyCondition(n *corev1.Node) corev1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c
		}
	}
	return corev1.NodeCondition{}
}

// activeFor is how long systemd's unit has been active: since its
// ActiveEnterTimestampMonotonic, on the clock the node's systemd shares
// with this process (CLOCK_MONOTONIC).
func activeFor(ctx context.Context, sys workflow.System, unit string) (time.Duration, error) {
	out, err := sys.Systemctl(ctx, "show", "--property=ActiveEnterTimestampMonotonic", "--value", unit)
	if err != nil {
		return 0, err
	}
	since, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil || since <= 0 {
		return 0, fmt.Errorf("%s's ActiveEnterTimestampMonotonic %q is no time", unit, out)
	}
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &now); err != nil {
		return 0, err
	}
	return time.Duration(now.Nano()) - time.Duration(since)*time.Microsecond, nil
}
