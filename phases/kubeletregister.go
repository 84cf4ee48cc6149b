package phases

import (
	"context"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/internal/workflow"
)

// RegisterGrace is how long PromptRegistration gives a kubelet that can
// reach the API server to register its Node before it restarts it.
const RegisterGrace = time.Second

// PromptRegistration waits up to RegisterGrace for the kubelet to
// register the Node called name and initialize its CSINode, and restarts
// kubelet.service once when it has not. A kubelet that started before it could reach the API server
// (a control-plane node's, before its API server answered; a worker's,
// before the cluster signed its client certificate) retries its
// registration on a backoff that grows to 7 s, and then its CSINode's
// initialization, which keeps the Node NotReady until it succeeds and
// fails until the Node exists, on one that jumps from 2 s to 15 s: the
// Node registers seconds late and turns Ready up to 15 s later still. A
// restarted kubelet reaches the API server at once, registers on its
// first tries and initializes its CSINode right after. Without systemd,
// or beside a kubelet.service that is not active, it changes nothing.
func PromptRegistration(ctx context.Context, s *workflow.Run, client kubernetes.Interface, name string) error {
	waitCtx, cancel := context.WithTimeout(ctx, RegisterGrace)
	defer cancel()
	if _, err := WatchNode(waitCtx, client, name, func(n *corev1.Node) bool { return !csiNodePending(n) }); err == nil || ctx.Err() != nil {
		return nil // registered, or the caller's own wait ends on ctx and says so
	}
	if _, err := os.Stat(s.Files.HostPath(SystemdRunDir)); err != nil {
		return nil
	}
	if out, err := s.System.Systemctl(ctx, "is-active", "kubelet"); err != nil || strings.TrimSpace(string(out)) != "active" {
		return nil
	}
	if err := systemctl(ctx, s.System, "restart", "kubelet"); err != nil {
		return err
	}
	s.Report.Infof("restarted kubelet.service: it reaches the API server, but had not registered Node %s and initialized its CSINode within %s, and its next tries to register it, "+
		"then to initialize its CSINode (the Node is NotReady until then), were up to 7 s and 15 s away (the kubelet's backoffs); restarted, it makes them at once", name, RegisterGrace)
	return nil
}

// csiNodePending says whether the kubelet reports, in the Node's Ready
// condition, that it has not initialized its CSINode yet.
func csiNodePending(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return strings.Contains(c.Message, "CSINode")
		}
	}
	return false
}
