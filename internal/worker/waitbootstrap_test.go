package worker

import (
	"context"
	"errors"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

// fakeKubeletClient makes the wait's kubelet.conf client n's fake
// clientset, once kubelet.conf exists.
func fakeKubeletClient(t *testing.T, n *workerNode) {
	t.Helper()
	n.s.KubeletClient = func(hostPath string) (kubernetes.Interface, error) {
		if _, err := os.Stat(hostPath); err != nil {
			return nil, err
		}
		return n.client, nil
	}
}

// TestKubeletWaitBootstrap: the kubelet writes kubelet.conf a moment
// after the phase starts, registers its Node NotReady, then reports it
// Ready. The phase watches the Node rather than polling it, and removes the
// bootstrap credential at the end.
func TestKubeletWaitBootstrap(t *testing.T) {
	n := newWorker(t, kubeletConfigMap(t))
	fakeKubeletClient(t, n)
	must(t, runPhases(t, n, Preflight, KubeletConfig, BootstrapKubeconfig))
	n.client.ClearActions()
	// The Node turns Ready only once the phase watches it, however loaded
	// the machine: a Ready Node found by the list would need no watch.
	watching := make(chan struct{})
	var once sync.Once
	n.client.PrependWatchReactor("nodes", func(k8stesting.Action) (bool, watch.Interface, error) {
		once.Do(func() { close(watching) })
		return false, nil, nil
	})
	go func() {
		ctx := context.Background()
		time.Sleep(200 * time.Millisecond)
		n.writeKubeletConf(t, n.ca, "worker1")
		_, _ = n.client.CoreV1().Nodes().Create(ctx, nodeObject(false), metav1.CreateOptions{})
		<-watching
		time.Sleep(200 * time.Millisecond)
		_, _ = n.client.CoreV1().Nodes().UpdateStatus(ctx, nodeObject(true), metav1.UpdateOptions{})
	}()
	must(t, runPhases(t, n, KubeletWaitBootstrap))
	out := n.out.String()
	for _, want := range []string{"waiting for the kubelet's TLS bootstrap", "waiting for Node worker1 to be Ready", `"Node worker1 is Ready"`,
		"removed /etc/kubernetes/bootstrap-kubelet.conf", "kubectl certificate approve"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	verbs := map[string]int{}
	for _, a := range n.client.Actions() {
		if a.GetResource().Resource == "nodes" {
			verbs[a.GetVerb()]++
		}
	}
	// One get is PromptRegistration's look at the Node before it decides.
	if verbs["watch"] == 0 || verbs["get"] > 1 {
		t.Errorf("node requests %v: want a watch, and no polling get", verbs)
	}
	if _, err := os.Stat(n.host(n.w.KubeconfigPath(config.KubeconfigBootstrapKubelet))); !os.IsNotExist(err) {
		t.Error("bootstrap-kubelet.conf is still there")
	}

	// The join converges: on the joined node, with its kubelet running
	// under systemd, the whole workflow again changes nothing.
	state := "active"
	sys, calls := phasestest.FakeSystemd(&state)
	must(t, os.MkdirAll(n.host(phases.SystemdRunDir), 0o755))
	rerun := newWorkerOf(t, n.ca, n.host("/"), kubeletConfigMap(t), nodeObject(true))
	rerun.s.System = sys
	rerun.w.Kubelet.ExtraConfig = n.w.Kubelet.ExtraConfig // the same kubelet port
	unit, err := Kubelet(rerun.s)
	must(t, err)
	mustWrite(t, rerun.host(phases.SystemdDropIn), unit.DropIn("/usr/bin/kubelet"), 0o644)
	before := phasestest.Snapshot(t, n.host("/"))
	fakeKubeletClient(t, rerun)
	listen(t, rerun) // the kubelet runs
	unchanged := phasestest.Unchanged(t, rerun.w)
	if _, err := JoinWorkflow.Run(context.Background(), rerun.s, nil); err != nil {
		t.Fatalf("re-run: %v\n%s", err, rerun.out)
	}
	unchanged("a worker's join") // the configuration is read-only
	if after := phasestest.Snapshot(t, n.host("/")); !maps.Equal(before, after) {
		t.Errorf("a re-run changed files: written %v", rerun.s.Files.Changes().Written)
	}
	for _, out := range []string{n.out.String(), rerun.out.String()} {
		if strings.Contains(out, workerToken.Secret) {
			t.Errorf("the progress holds the token's secret:\n%s", out)
		}
	}
	if strings.Join(*calls, ",") != "is-active kubelet" {
		t.Errorf("a re-run ran systemctl %v", *calls)
	}
}

func TestKubeletWaitBootstrapTimesOut(t *testing.T) {
	// No kubelet.conf ever.
	n := newWorker(t)
	fakeKubeletClient(t, n)
	n.w.Timeouts.TLSBootstrap.Duration = 300 * time.Millisecond
	err := runPhases(t, n, KubeletWaitBootstrap)
	var timeout *exit.TimeoutError
	if !errors.As(err, &timeout) || !strings.Contains(err.Error(), "the kubelet did not write /etc/kubernetes/kubelet.conf within 300ms (timeouts.tlsBootstrap") ||
		!strings.Contains(err.Error(), "--bootstrap-kubeconfig /etc/kubernetes/bootstrap-kubelet.conf") {
		t.Fatalf("got %v", err)
	}

	// A Node that stays NotReady for want of a pod network: the wait says
	// so at once, once, and the error says what to look at.
	n = newWorker(t, nodeObject(false))
	fakeKubeletClient(t, n)
	n.writeKubeletConf(t, n.ca, "worker1")
	n.w.Timeouts.TLSBootstrap.Duration = 300 * time.Millisecond
	err = runPhases(t, n, KubeletWaitBootstrap)
	if !errors.As(err, &timeout) || exit.Code(err) != exit.NotHealthy ||
		!strings.Contains(err.Error(), "Node worker1 did not become Ready within 300ms (timeouts.tlsBootstrap): it waits for a pod network (container runtime network not ready") ||
		!strings.Contains(err.Error(), "With addons.cni.provider none, the cluster's pod network is yours to install") {
		t.Fatalf("got %v", err)
	}
	if out := n.out.String(); strings.Count(out, "Node worker1 waits for a pod network (container runtime network not ready") != 1 {
		t.Errorf("the wait does not say once that the node waits for a pod network:\n%s", out)
	}

	// A Node NotReady for another reason: the error gives the kubelet's.
	other := nodeObject(false)
	other.Status.Conditions[0].Message = "PLEG is not healthy: pleg was last seen active 3m0s ago"
	n = newWorker(t, other)
	fakeKubeletClient(t, n)
	n.writeKubeletConf(t, n.ca, "worker1")
	n.w.Timeouts.TLSBootstrap.Duration = 300 * time.Millisecond
	err = runPhases(t, n, KubeletWaitBootstrap)
	if err == nil || !strings.Contains(err.Error(), "it is not Ready (KubeletNotReady: PLEG is not healthy") || strings.Contains(n.out.String(), "pod network") {
		t.Fatalf("got %v\n%s", err, n.out.String())
	}

	// A Node never registered.
	n = newWorker(t)
	fakeKubeletClient(t, n)
	n.writeKubeletConf(t, n.ca, "worker1")
	n.w.Timeouts.TLSBootstrap.Duration = 300 * time.Millisecond
	if err := runPhases(t, n, KubeletWaitBootstrap); err == nil || !strings.Contains(err.Error(), "the kubelet never registered it") {
		t.Fatalf("got %v", err)
	}
}
