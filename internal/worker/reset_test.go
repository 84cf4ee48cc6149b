package worker

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
	"github.com/kubeboot/kubeboot/templates"
)

// TestWorkerReset: reset on a joined worker stops kubelet.service, removes
// kubeboot's drop-in (and reloads systemd), the join's files and the
// kubelet's certificates, and nothing else; it says what it left, and a
// re-run changes nothing. A drop-in kubeboot did not write stays.
func TestWorkerReset(t *testing.T) {
	n := newWorker(t, kubeletConfigMap(t))
	must(t, runPhases(t, n, Preflight, KubeletConfig, BootstrapKubeconfig))
	n.writeKubeletConf(t, n.ca, "worker1")
	rotated := "/var/lib/kubelet/pki/kubelet-client-2026-11-26-18-00-00.pem"
	mustWrite(t, n.host(rotated), []byte("the kubelet's pair"), 0o600)
	mustWrite(t, n.host("/var/lib/kubelet/pki/kubelet.crt"), []byte("self-signed"), 0o600)
	// The user's, named like the kubelet's pairs but not as the kubelet
	// names them.
	others := []string{"/var/lib/kubelet/pki/not-the-kubelets.pem", "/var/lib/kubelet/cpu_manager_state", "/etc/kubernetes/users-file.conf",
		"/var/lib/kubelet/pki/kubelet-client-backup.pem", "/var/lib/kubelet/pki/kubelet-client-2026-11-26.pem", "/var/lib/kubelet/pki/kubelet-server-old.pem"}
	for _, p := range others {
		mustWrite(t, n.host(p), []byte("someone's"), 0o600)
	}
	must(t, os.MkdirAll(n.host(phases.SystemdRunDir), 0o755))
	unit, err := Kubelet(n.s)
	must(t, err)
	mustWrite(t, n.host(phases.SystemdDropIn), unit.DropIn("/usr/bin/kubelet"), 0o644)
	// The pod network kubeboot's flannel made on the node.
	mustWrite(t, n.host(templates.FlannelCNIConfPath), []byte(templates.FlannelCNIConfig), 0o644)
	mustWrite(t, n.host(templates.FlannelIPAMDir+"/10.244.1.5"), []byte("a pod's"), 0o644)
	links := map[string]bool{"cni0": true, "flannel.1": true}
	state := "active"
	sys, calls := phasestest.FakeSystemd(&state)
	sys.DeleteLink = func(name string) (bool, error) {
		had := links[name]
		delete(links, name)
		return had, nil
	}
	n.s.System = sys
	pods := phasestest.ServePods(t, n.host("/run/containerd/containerd.sock"), "default/web")

	// A dry run stops nothing and removes nothing.
	dry := NewNode(&workflow.Run{Files: &files.DryRunWriter{Root: n.host("/"), Report: n.s.Report, Stdout: io.Discard}, Report: n.s.Report,
		Options: workflow.Options{DryRun: true}, System: sys}, n.w)
	before := phasestest.Snapshot(t, n.host("/"))
	_, err = Reset(false).Execute(context.Background(), dry)
	must(t, err)
	if after := phasestest.Snapshot(t, n.host("/")); !cmp.Equal(before, after) || len(*calls) > 0 || len(links) != 2 || len(pods()) != 1 {
		t.Fatalf("a dry run ran systemctl %v, deleted interfaces (left %v), removed pods (left %v) or changed files: %s", *calls, links, pods(), cmp.Diff(before, after))
	}

	_, err = Reset(false).Execute(context.Background(), n.s)
	must(t, err)
	if diff := cmp.Diff([]string{"is-active kubelet", "stop kubelet", "daemon-reload"}, *calls); diff != "" {
		t.Errorf("systemctl calls (-want +got):\n%s", diff)
	}
	w := n.w
	for _, gone := range []string{phases.SystemdDropIn, w.KubeconfigPath(config.KubeconfigKubelet), w.KubeconfigPath(config.KubeconfigBootstrapKubelet),
		w.Kubelet.ConfigFile, w.CAPath(), "/var/lib/kubelet/pki/kubelet-client-current.pem", rotated, "/var/lib/kubelet/pki/kubelet.crt", w.Paths.ManifestsDir,
		templates.FlannelCNIConfPath, templates.FlannelIPAMDir} {
		if _, err := os.Lstat(n.host(gone)); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", gone, err)
		}
	}
	for _, kept := range others {
		if _, err := os.Stat(n.host(kept)); err != nil {
			t.Errorf("reset removed %s, not kubeboot's: %v", kept, err)
		}
	}
	if len(links) > 0 || len(pods()) > 0 {
		t.Errorf("the pod network's interfaces %v or the runtime's pods %v are still there", links, pods())
	}
	if out := n.out.String(); !strings.Contains(out, "deleted the network interface cni0") || !strings.Contains(out, "left iptables") || !strings.Contains(out, "left the Node object: `kubectl delete node worker1`") {
		t.Errorf("reset does not say what it removed and left:\n%s", out)
	}

	// A re-run changes nothing; a drop-in of someone else's stays, and so
	// does a static pod path with someone's manifest in it.
	state, *calls = "inactive", nil
	mustWrite(t, n.host(phases.SystemdDropIn), []byte("# the operator's own\n[Service]\n"), 0o644)
	mustWrite(t, n.host(w.Paths.ManifestsDir+"/someones.yaml"), []byte("someone's"), 0o600)
	before = phasestest.Snapshot(t, n.host("/"))
	_, err = Reset(false).Execute(context.Background(), n.s)
	must(t, err)
	if after := phasestest.Snapshot(t, n.host("/")); !cmp.Equal(before, after) {
		t.Errorf("a re-run changed files: %s", cmp.Diff(before, after))
	}
	if diff := cmp.Diff([]string{"is-active kubelet"}, *calls); diff != "" {
		t.Errorf("re-run: systemctl calls (-want +got):\n%s", diff)
	}
	if !strings.Contains(n.out.String(), "left "+w.Paths.ManifestsDir+": it holds files kubeboot did not write") {
		t.Errorf("a static pod path with someone's manifest is not reported:\n%s", n.out)
	}
	if !strings.Contains(n.out.String(), "left "+phases.SystemdDropIn+": kubeboot did not write it") {
		t.Errorf("a foreign drop-in is not reported:\n%s", n.out)
	}
}

// TestWorkerResetDeletesTheNode: with deleteNode, reset deletes the
// worker's Node through the run's client (one that is gone is no error),
// and refuses without a client, before removing any file.
func TestWorkerResetDeletesTheNode(t *testing.T) {
	n := newWorker(t, nodeObject(true))
	_, err := Reset(true).Execute(context.Background(), n.s)
	must(t, err)
	if _, err := n.client.CoreV1().Nodes().Get(context.Background(), "worker1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Node worker1 after reset --delete-node: %v", err)
	}
	if !strings.Contains(n.out.String(), "deleted Node worker1") {
		t.Errorf("output:\n%s", n.out)
	}
	_, err = Reset(true).Execute(context.Background(), n.s)
	must(t, err)

	n = newWorker(t, kubeletConfigMap(t))
	must(t, runPhases(t, n, Preflight, KubeletConfig, BootstrapKubeconfig))
	n.s.API = nil
	_, err = Reset(true).Execute(context.Background(), n.s)
	if exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), "--delete-node needs --kubeconfig") {
		t.Errorf("reset --delete-node without a client: %v", err)
	}
	if _, err := os.Stat(n.host(n.w.Kubelet.ConfigFile)); err != nil {
		t.Errorf("a refused reset removed the kubelet's configuration: %v", err)
	}
}
