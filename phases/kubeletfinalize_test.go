package phases_test

import (
	"bytes"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
	"github.com/kubeboot/kubeboot/pki"
)

// initNode is node1 on root, where the certs and kubeconfig phases have
// run, for a new run whose waits end after a second; out collects its
// progress.
func initNode(t *testing.T, root string) (*phases.Node, *bytes.Buffer) {
	t.Helper()
	if err := phasestest.Run(phasestest.NewNode(t, root, config.DefaultKubernetesVersion), phases.Certs, phases.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	s := phasestest.NewNode(t, root, config.DefaultKubernetesVersion)
	s.Config.Timeouts.ControlPlane.Duration = time.Second
	var out bytes.Buffer
	s.Report = output.NewReporter(&out, false)
	return s, &out
}

// kubeletConfUser is the user of kubelet.conf's current context.
func kubeletConfUser(t *testing.T, s *phases.Node) (certFile, keyFile string, embedded bool) {
	t.Helper()
	cfg, err := clientcmd.Load(phasestest.HostFile(t, s, s.Config.KubeconfigPath(config.KubeconfigKubelet)))
	if err != nil {
		t.Fatal(err)
	}
	user := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
	return user.ClientCertificate, user.ClientKey, len(user.ClientCertificateData) > 0 || len(user.ClientKeyData) > 0
}

// TestKubeletFinalize: once the kubelet has written its pair, kubelet.conf
// names it, and init run again writes nothing.
func TestKubeletFinalize(t *testing.T) {
	root := t.TempDir()
	s, out := initNode(t, root)
	s.Config.Timeouts.ControlPlane.Duration = 10 * time.Second
	// The kubelet writes its pair a moment after the phase starts looking:
	// the pair made aside comes into its place then.
	aside := *s.Config
	aside.Kubelet.CertDir = "/var/lib/kubelet/pki.new"
	phasestest.KubeletPair(t, &phases.Node{Run: &workflow.Run{Files: s.Files}, Config: &aside}, phasestest.ClusterCA(t, s), "node1")
	moved := make(chan error)
	go func() {
		time.Sleep(700 * time.Millisecond)
		moved <- os.Rename(s.Files.HostPath(aside.Kubelet.CertDir), s.Files.HostPath(s.Config.Kubelet.CertDir))
	}()
	if err := phasestest.Run(s, phases.KubeletFinalize); err != nil {
		t.Fatal(err)
	}
	if err := <-moved; err != nil {
		t.Fatal(err)
	}
	pair := "/var/lib/kubelet/pki/kubelet-client-current.pem"
	certFile, keyFile, embedded := kubeletConfUser(t, s)
	if certFile != pair || keyFile != pair || embedded {
		t.Errorf("kubelet.conf's user: certificate %q, key %q, embedded data %t", certFile, keyFile, embedded)
	}
	if !strings.Contains(out.String(), "/etc/kubernetes/kubelet.conf now names "+pair+", the client certificate the kubelet rotates") {
		t.Errorf("output:\n%s", out)
	}
	if info, ok := phasestest.Snapshot(t, root)["/etc/kubernetes/kubelet.conf"]; !ok || info.Mode.Perm() != pki.ModeKubeconfig {
		t.Errorf("kubelet.conf's mode is %v, want %v", info.Mode.Perm(), pki.ModeKubeconfig)
	}

	// init again: the kubeconfig phase keeps the finalized kubelet.conf, and
	// kubelet-finalize finds it done.
	before := phasestest.Snapshot(t, root)
	s = phasestest.NewNode(t, root, config.DefaultKubernetesVersion)
	out.Reset()
	s.Report = output.NewReporter(out, false)
	if err := phasestest.Run(s, phases.Certs, phases.Kubeconfig, phases.KubeletFinalize); err != nil {
		t.Fatal(err)
	}
	if written := s.Files.Changes().Written; len(written) > 0 || !maps.Equal(before, phasestest.Snapshot(t, root)) {
		t.Errorf("a re-run wrote %v\n%s", written, out)
	}
	if !strings.Contains(out.String(), "/etc/kubernetes/kubelet.conf names "+pair+", the client certificate the kubelet rotates (expires ") {
		t.Errorf("re-run output:\n%s", out)
	}
}

// TestKubeletFinalizeTakesOnlyThisNodesPair: a pair of another cluster or
// of another node, or none, is waited on and then left, with a warning;
// kubelet.conf keeps its embedded certificate.
func TestKubeletFinalizeTakesOnlyThisNodesPair(t *testing.T) {
	otherCA, err := pki.NewCA(pki.CertSpec{Name: "ca", CN: "kubernetes", Usage: pki.UsageCA, Algorithm: config.ECDSAP256, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		write func(t *testing.T, s *phases.Node)
		why   string
	}{
		{"none", func(*testing.T, *phases.Node) {}, "/var/lib/kubelet/pki/kubelet-client-current.pem does not exist"},
		{"another cluster's", func(t *testing.T, s *phases.Node) { phasestest.KubeletPair(t, s, otherCA, "node1") },
			"/var/lib/kubelet/pki/kubelet-client-current.pem: is not signed by ca.crt"},
		{"another node's", func(t *testing.T, s *phases.Node) { phasestest.KubeletPair(t, s, phasestest.ClusterCA(t, s), "node2") },
			`/var/lib/kubelet/pki/kubelet-client-current.pem: wrong CN "system:node:node2", want "system:node:node1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, out := initNode(t, t.TempDir())
			tt.write(t, s)
			start := time.Now()
			if err := phasestest.Run(s, phases.KubeletFinalize); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took < time.Second {
				t.Errorf("gave up after %s, before timeouts.controlPlane", took)
			}
			if _, _, embedded := kubeletConfUser(t, s); !embedded || len(s.Files.Changes().Written) > 0 {
				t.Errorf("kubelet.conf changed: wrote %v", s.Files.Changes().Written)
			}
			expires := phasestest.ParseCert(t, s, config.CertKubeletServer).NotAfter.UTC().Format(time.DateOnly) // kubelet.conf's certificate is as long-lived
			want := tt.why + ", still so after 1s (timeouts.controlPlane), so /etc/kubernetes/kubelet.conf keeps the client certificate kubeboot embedded, which expires " + expires
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		})
	}
}

// TestKubeletFinalizeWithoutRotation: a kubelet that rotates nothing has
// no pair to wait for.
func TestKubeletFinalizeWithoutRotation(t *testing.T) {
	s, out := initNode(t, t.TempDir())
	s.Config.Kubelet.ExtraConfig = map[string]any{"rotateCertificates": false}
	start := time.Now()
	if err := phasestest.Run(s, phases.KubeletFinalize); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 500*time.Millisecond || len(s.Files.Changes().Written) > 0 ||
		!strings.Contains(out.String(), "kubelet.extraConfig sets rotateCertificates to false, so the kubelet renews no certificate: /etc/kubernetes/kubelet.conf keeps the client certificate kubeboot embedded, which expires ") {
		t.Errorf("took %s, wrote %v\n%s", time.Since(start), s.Files.Changes().Written, out)
	}
}
