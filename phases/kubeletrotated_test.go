package phases_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

// TestFinalizedKubeletConfIsTheKubelets: once kubelet.conf names the
// certificate the kubelet rotates, the kubeconfig phase reuses it and a
// renewal leaves it to the kubelet, saying so.
func TestFinalizedKubeletConfIsTheKubelets(t *testing.T) {
	root := t.TempDir()
	s, _ := initNode(t, root)
	phasestest.KubeletPair(t, s, phasestest.ClusterCA(t, s), s.Config.Node.Name)
	if err := phasestest.Run(s, phases.KubeletFinalize); err != nil {
		t.Fatal(err)
	}
	finalized := phasestest.HostFile(t, s, s.Config.KubeconfigPath(config.KubeconfigKubelet))

	s, out := kubeletNode(t, root, phases.KubeletPort)
	if err := phasestest.Run(s, phases.Certs, phases.Kubeconfig); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if written := s.Files.Changes().Written; len(written) > 0 {
		t.Errorf("the kubeconfig phase wrote %v on a finalized node", written)
	}

	for _, names := range [][]string{{config.KubeconfigKubelet}, nil} {
		s, out = kubeletNode(t, root, phases.KubeletPort)
		restarts, err := phases.RenewCerts(s, names, false)
		if err != nil {
			t.Fatal(err)
		}
		kubeletConf := s.Config.KubeconfigPath(config.KubeconfigKubelet)
		if slices.Contains(s.Files.Changes().Written, kubeletConf) || string(phasestest.HostFile(t, s, kubeletConf)) != string(finalized) ||
			!strings.Contains(out.String(), "/etc/kubernetes/kubelet.conf names /var/lib/kubelet/pki/kubelet-client-current.pem, the client certificate the kubelet rotates itself (expires ") {
			t.Errorf("renew %v: rewrote kubelet.conf, or did not say why not:\n%s", names, out)
		}
		if names != nil && len(restarts) > 0 {
			t.Errorf("renew kubelet.conf: restarts %v, want none", restarts)
		}
	}
}

// TestKubeconfigWarnsOfAnAgingKubeletCertificate: a certificate the
// kubelet has not replaced within the renewal window is a warning, not a
// failure: renewing it is the kubelet's work.
func TestKubeconfigWarnsOfAnAgingKubeletCertificate(t *testing.T) {
	root := t.TempDir()
	s, _ := initNode(t, root)
	aging := *s.Config
	aging.Certificates.LeafValidity.Duration = 10 * 24 * time.Hour
	phasestest.KubeletPair(t, &phases.Node{Run: &workflow.Run{Files: s.Files}, Config: &aging}, phasestest.ClusterCA(t, s), "node1")
	if err := phasestest.Run(s, phases.KubeletFinalize); err != nil {
		t.Fatal(err)
	}

	s, out := kubeletNode(t, root, phases.KubeletPort)
	if err := phasestest.Run(s, phases.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	warning := regexp.MustCompile(`/etc/kubernetes/kubelet.conf names /var/lib/kubelet/pki/kubelet-client-current.pem, the client certificate the kubelet rotates, ` +
		`which expires \d{4}-\d\d-\d\d, within the renewal window of 720h`)
	if !warning.MatchString(out.String()) || len(s.Files.Changes().Written) > 0 {
		t.Errorf("wrote %v; output lacks the warning:\n%s", s.Files.Changes().Written, out)
	}
}
