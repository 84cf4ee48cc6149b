package phases_test

import (
	"bytes"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/testsupport"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

// kubeletNode is node1 on root, its kubelet on a free loopback port;
// out collects the progress.
func kubeletNode(t *testing.T, root string, port int) (*phases.Node, *bytes.Buffer) {
	t.Helper()
	s := phasestest.NewNode(t, root, config.DefaultKubernetesVersion)
	s.Config.Kubelet.ExtraConfig = map[string]any{"address": "127.0.0.1", "port": float64(port)}
	var out bytes.Buffer
	s.Report = output.NewReporter(&out, false)
	return s, &out
}

// TestInitKubeletStart: init's kubelet-start says what to run without
// systemd; with it, it writes the drop-in with a control-plane node's
// flags and restarts the kubelet, only when a file it reads at start
// changed or it is not active.
func TestInitKubeletStart(t *testing.T) {
	state := "inactive"
	sys, calls := phasestest.FakeSystemd(&state)
	root, port := t.TempDir(), testsupport.FreePort(t)

	s, out := kubeletNode(t, root, port)
	s.System = sys
	if err := phasestest.Run(s, phases.KubeletStart(phases.ControlPlaneKubelet)); err != nil {
		t.Fatal(err)
	}
	command := "kubelet --config=/var/lib/kubelet/config.yaml --kubeconfig=/etc/kubernetes/kubelet.conf --cert-dir=/var/lib/kubelet/pki --hostname-override=node1 --node-ip=10.0.0.10"
	if len(*calls) > 0 || len(s.Files.Changes().Written) > 0 ||
		!strings.Contains(out.String(), "start the kubelet yourself, as "+command+", within timeouts.controlPlane (4m0s)") {
		t.Errorf("without systemd: ran %v, wrote %v\n%s", *calls, s.Files.Changes().Written, out)
	}

	// With systemd, on a node init has just written: the drop-in, a
	// reload and a restart.
	if err := os.MkdirAll(s.Files.HostPath(phases.SystemdRunDir), 0o755); err != nil {
		t.Fatal(err)
	}
	s, _ = kubeletNode(t, root, port)
	s.System = sys
	if err := phasestest.Run(s, phases.Certs, phases.Kubeconfig, phases.KubeletConfig, phases.KubeletStart(phases.ControlPlaneKubelet)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"is-active kubelet", "daemon-reload", "restart kubelet", "is-enabled kubelet"}, *calls); diff != "" {
		t.Errorf("systemctl calls (-want +got):\n%s", diff)
	}
	dropIn := string(phasestest.HostFile(t, s, phases.SystemdDropIn))
	if !strings.HasPrefix(dropIn, "# Written by kubeboot: this control-plane node's kubelet") ||
		!strings.HasSuffix(dropIn, "\nExecStart=\nExecStart=/usr/bin/"+command+"\n") {
		t.Errorf("drop-in:\n%s", dropIn)
	}

	// A re-run leaves the active kubelet running and writes nothing.
	*calls = nil
	s, _ = kubeletNode(t, root, port)
	s.System = sys
	if err := phasestest.Run(s, phases.Certs, phases.Kubeconfig, phases.KubeletConfig, phases.KubeletStart(phases.ControlPlaneKubelet)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"is-active kubelet"}, *calls); diff != "" || len(s.Files.Changes().Written) > 0 {
		t.Errorf("re-run: systemctl calls (-want +got):\n%s; wrote %v", diff, s.Files.Changes().Written)
	}

	// A kubelet configuration written in this run restarts it.
	*calls = nil
	s, _ = kubeletNode(t, root, port)
	s.System = sys
	s.Config.Kubelet.ExtraConfig["failSwapOn"] = false
	if err := phasestest.Run(s, phases.KubeletConfig, phases.KubeletStart(phases.ControlPlaneKubelet)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"is-active kubelet", "restart kubelet", "is-enabled kubelet"}, *calls); diff != "" {
		t.Errorf("after a new kubelet config: systemctl calls (-want +got):\n%s", diff)
	}
}

// TestInitKubeletStartLeavesAnotherKubelet: beside a kubelet that
// kubelet.service does not run, such as the lab's, nothing is written and
// nothing restarted.
func TestInitKubeletStartLeavesAnotherKubelet(t *testing.T) {
	state := "inactive"
	sys, calls := phasestest.FakeSystemd(&state)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	s, out := kubeletNode(t, t.TempDir(), l.Addr().(*net.TCPAddr).Port)
	s.System = sys
	if err := os.MkdirAll(s.Files.HostPath(phases.SystemdRunDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := phasestest.Run(s, phases.KubeletStart(phases.ControlPlaneKubelet)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"is-active kubelet"}, *calls); diff != "" || len(s.Files.Changes().Written) > 0 ||
		!strings.Contains(out.String(), "a kubelet that kubelet.service does not run already listens on 127.0.0.1:") {
		t.Errorf("systemctl calls (-want +got):\n%s; wrote %v\n%s", diff, s.Files.Changes().Written, out)
	}
}

// TestKubeletStartDualStack: a dual-stack control-plane node's kubelet
// reports both of its addresses, the advertise address first.
func TestKubeletStartDualStack(t *testing.T) {
	state := "inactive"
	sys, _ := phasestest.FakeSystemd(&state)
	s, out := kubeletNode(t, t.TempDir(), testsupport.FreePort(t))
	s.System = sys
	s.Config.Node.SecondaryAddress = "fd00:89::10"
	if err := phasestest.Run(s, phases.KubeletStart(phases.ControlPlaneKubelet)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "--hostname-override=node1 --node-ip=10.0.0.10,fd00:89::10,") {
		t.Errorf("the kubelet's flags lack both node IPs:\n%s", out)
	}
}
