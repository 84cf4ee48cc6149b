package phases

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/internal/config"
)

func TestImagesFollowTheRenderedPods(t *testing.T) {
	s := manifestState(t, t.TempDir(), "v1.35.4")
	got, err := Images(s)
	must(t, err)
	want := []string{"registry.k8s.io/etcd:3.6.8-0", "registry.k8s.io/kube-apiserver:v1.35.4",
		"registry.k8s.io/kube-controller-manager:v1.35.4", "registry.k8s.io/kube-scheduler:v1.35.4", "registry.k8s.io/pause:3.10.2",
		config.DefaultFlannelPluginImage, config.DefaultFlannelImage, "registry.k8s.io/kube-proxy:v1.35.4", "registry.k8s.io/coredns/coredns:v1.13.1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("images (-want +got):\n%s", diff)
	}

	// A disabled addon's image is not needed.
	cni := s.Config.Addons.CNI
	s.Config.Addons.KubeProxy.Disabled, s.Config.Addons.CoreDNS.Disabled = true, true
	s.Config.Addons.CNI = config.CNI{Provider: config.CNINone}
	got, err = Images(s)
	must(t, err)
	if diff := cmp.Diff(want[:5], got); diff != "" {
		t.Errorf("images without addons (-want +got):\n%s", diff)
	}
	s.Config.Addons.KubeProxy.Disabled, s.Config.Addons.CoreDNS.Disabled = false, false
	s.Config.Addons.CNI = cni

	// A patch that changes an image changes the list, as it changes the pod.
	patches := s.Files.HostPath("/etc/kubernetes/patches")
	must(t, os.MkdirAll(patches, 0o700))
	patch := "spec:\n  containers:\n  - name: kube-scheduler\n    image: mirror.example/kube-scheduler:v1.35.4\n"
	must(t, os.WriteFile(filepath.Join(patches, "kube-scheduler.yaml"), []byte(patch), 0o600))
	s.Config.PatchesDir = "/etc/kubernetes/patches"
	got, err = Images(s)
	must(t, err)
	if got[3] != "mirror.example/kube-scheduler:v1.35.4" {
		t.Errorf("patched scheduler image: got %v", got)
	}
}

// TestDefaultImagesAreServedUpstream: with defaults, and with the
// scheduled snapshots on, every image a node needs is one registry.k8s.io
// serves under that name, or flannel's from flannel's own registry:
// kubeboot's own pods start from the pause image and run the node's
// binary, so no image of kubeboot's is needed.
func TestDefaultImagesAreServedUpstream(t *testing.T) {
	s := manifestState(t, t.TempDir(), config.DefaultKubernetesVersion)
	s.Config.Etcd.Local.ScheduledSnapshots = &config.ScheduledSnapshots{}
	config.SetDefaults(s.Config, config.Host{Name: "node1", Address: "10.0.0.10"})
	got, err := Images(s)
	must(t, err)
	if !slices.Contains(got, "registry.k8s.io/pause:"+config.PauseVersion) || len(got) != 9 {
		t.Errorf("images %q, want the five components', the pause image, flannel's two and the two other addons'", got)
	}
	for _, image := range got {
		if !strings.HasPrefix(image, "registry.k8s.io/") && !strings.HasPrefix(image, "ghcr.io/flannel-io/") {
			t.Errorf("%s is served by neither registry.k8s.io nor flannel's ghcr.io/flannel-io", image)
		}
	}
}
