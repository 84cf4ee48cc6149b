package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
)

// KubeletWaitBootstrap waits, within timeouts.tlsBootstrap, for the
// kubelet's TLS bootstrap to end (its kubelet.conf, with its own client
// certificate) and then, watching the Node with that credential, for the
// Node to be Ready, restarting a kubelet that is late to register it
// (phases.PromptRegistration). It then removes bootstrap-kubelet.conf, as kubeadm
// does: the token is needed no more.
var KubeletWaitBootstrap = workflow.Phase[*Node]{
	Name:     "kubelet-wait-bootstrap",
	Short:    "Wait for the kubelet's TLS bootstrap (its kubelet.conf) and for its Node to be Ready",
	LiveOnly: true,
	Run:      runWaitBootstrap,
}

// kubeletClient builds a client from the kubelet's kubeconfig at hostPath
// with client-go: Node.KubeletClient of a real join.
func kubeletClient(hostPath string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", hostPath)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = phases.FieldManager
	return kubernetes.NewForConfig(cfg)
}

// kubeletConfPoll is how often the wait looks for kubelet.conf: a file
// the kubelet writes once, with nothing to watch it through. Often,
// because the node's Node waits on the look (PromptRegistration's restart
// of the kubelet follows it), and a look at a file not yet there is one
// failed open.
const kubeletConfPoll = 100 * time.Millisecond

func runWaitBootstrap(ctx context.Context, s *Node) error {
	w := s.Config
	timeout := w.Timeouts.TLSBootstrap.Duration
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	path := w.KubeconfigPath(config.KubeconfigKubelet)
	bootstrap := w.KubeconfigPath(config.KubeconfigBootstrapKubelet)
	var client kubernetes.Interface
	var last error
	told := false
	err := wait.PollUntilContextCancel(waitCtx, kubeletConfPoll, true, func(context.Context) (bool, error) {
		if client, last = s.KubeletClient(s.Files.HostPath(path)); last == nil {
			return true, nil
		}
		if !told {
			s.Report.Infof("waiting for the kubelet's TLS bootstrap: it writes %s once the cluster has signed its client certificate", path)
			told = true
		}
		return false, nil
	})
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("wait for %q: %w", path, ctx.Err())
	case err != nil:
		return &exit.TimeoutError{Msg: fmt.Sprintf("the kubelet did not write %s within %s (timeouts.tlsBootstrap; last: %v): is it running with --bootstrap-kubeconfig %s "+
			"(`systemctl status kubelet`, `journalctl -u kubelet`)? The controller manager approves and signs its certificate request (`kubectl get csr` on a control-plane node)",
			path, timeout, last, bootstrap)}
	}
	s.Report.Infof("the kubelet holds its client certificate (%s); waiting for Node %s to be Ready", path, w.Node.Name)
	if err := phases.PromptRegistration(waitCtx, s.Base(), client, w.Node.Name); err != nil {
		return err
	}
	toldNetwork := false
	node, err := phases.WatchNode(waitCtx, client, w.Node.Name, func(n *corev1.Node) bool {
		if phases.NodeReady(n) {
			return true
		}
		if why := waitsForNetwork(n); why != "" && !toldNetwork {
			s.Report.Warnf("Node %s waits for a pod network (%s): kubeboot's flannel brings it up where the cluster's addons.cni.provider is flannel; "+
				"with provider none, install your pod network, and the node becomes Ready", w.Node.Name, why)
			toldNetwork = true
		}
		return false
	})
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("wait for Node %q: %w", w.Node.Name, ctx.Err())
	case wait.Interrupted(err) || errors.Is(err, context.DeadlineExceeded):
		return &exit.TimeoutError{Msg: fmt.Sprintf("Node %s did not become Ready within %s (timeouts.tlsBootstrap): %s", w.Node.Name, timeout, notReady(node, w.Node.Name))}
	case err != nil:
		return fmt.Errorf("watch Node %q: %w", w.Node.Name, err)
	}
	s.Report.Infof("Node %s is Ready", w.Node.Name)
	if _, err := os.Lstat(s.Files.HostPath(bootstrap)); err == nil {
		if err := s.Files.Remove(bootstrap); err != nil {
			return err
		}
		s.Report.Infof("removed %s: the kubelet has its own credential, and the token is needed no more", bootstrap)
	}
	s.Report.Infof("the kubelet asks the cluster CA for its serving certificate (serverTLSBootstrap): the control plane's CSR approver approves it " +
		"(with csrApprover.enabled false, a cluster admin: `kubectl certificate approve NAME`); until then the API server cannot reach this kubelet for logs, exec and port-forward")
	return nil
}

// notReady says why the wait for a Node gave up, from its last state.
func notReady(node *corev1.Node, name string) string {
	if node == nil {
		return fmt.Sprintf("the kubelet never registered it: does it keep running (one that exits at its start is restarted over and over: `systemctl status kubelet`), "+
			"with --hostname-override=%s? `journalctl -u kubelet` says why", name)
	}
	c := phases.NodeReadyCondition(node)
	if c.Type == "" {
		return "it has no Ready condition yet"
	}
	if why := waitsForNetwork(node); why != "" {
		return fmt.Sprintf("it waits for a pod network (%s): is the cluster's pod network running (`kubectl -n kube-system get pods -o wide`)? "+
			"With addons.cni.provider none, the cluster's pod network is yours to install", why)
	}
	return fmt.Sprintf("it is %s (%s: %s); a network plugin that is not ready is the usual cause", conditionStatus(c), c.Reason, c.Message)
}

// waitsForNetwork says what the kubelet reports when the Node is not
// Ready only for want of a pod network (the runtime has no CNI
// configuration, or its plugin fails), or "" otherwise.
func waitsForNetwork(node *corev1.Node) string {
	c := phases.NodeReadyCondition(node)
	if c.Status == corev1.ConditionTrue || !strings.Contains(c.Message, "NetworkReady=false") {
		return ""
	}
	return c.Message
}

// conditionStatus says what a Ready condition's status means.
func conditionStatus(c corev1.NodeCondition) string {
	if c.Status == corev1.ConditionUnknown {
		return "in an unknown state"
	}
	return "not Ready"
}
