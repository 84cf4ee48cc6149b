package phases_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
	"github.com/kubeboot/kubeboot/pki"
)

// finalizeByHand points kubelet.conf of s at a client certificate the
// kubelet rotates, as kubelet-finalize leaves it, and returns its content.
func finalizeByHand(t *testing.T, s *phases.State) []byte {
	t.Helper()
	ca := phasestest.ClusterCA(t, s)
	pair := phasestest.KubeletPair(t, s, ca, s.Config.Node.Name)
	i := slices.IndexFunc(pki.KubeconfigSpecs(s.Config), func(k pki.KubeconfigSpec) bool { return k.Name == config.KubeconfigKubelet })
	data, err := pki.RotatedKubeconfig(pki.KubeconfigSpecs(s.Config)[i], ca.Cert, pair)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.Files.HostPath(s.Config.KubeconfigPath(config.KubeconfigKubelet)), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return data
}

// TestFinalizedKubeletConfIsTheKubelets: once kubelet.conf names the
// certificate the kubelet rotates, the kubeconfig phase reuses it and a
// renewal leaves it to the kubelet, saying so.
func TestFinalizedKubeletConfIsTheKubelets(t *testing.T) {
	root := t.TempDir()
	s := phasestest.NewState(t, root, config.DefaultKubernetesVersion)
	if err := phasestest.Run(s, phases.Certs, phases.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	finalized := finalizeByHand(t, s)

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
