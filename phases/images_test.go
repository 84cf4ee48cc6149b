package phases

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestImagesFollowTheRenderedPods(t *testing.T) {
	s := manifestState(t, t.TempDir(), "v1.35.4")
	got, err := Images(s)
	must(t, err)
	want := []string{"registry.k8s.io/etcd:3.6.8-0", "registry.k8s.io/kube-apiserver:v1.35.4",
		"registry.k8s.io/kube-controller-manager:v1.35.4", "registry.k8s.io/kube-scheduler:v1.35.4", "kubeboot.io/kubeboot:dev",
		"registry.k8s.io/kube-proxy:v1.35.4", "registry.k8s.io/coredns/coredns:v1.13.1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("images (-want +got):\n%s", diff)
	}

	// A disabled addon's image is not needed.
	s.Config.Addons.KubeProxy.Disabled, s.Config.Addons.CoreDNS.Disabled = true, true
	got, err = Images(s)
	must(t, err)
	if diff := cmp.Diff(want[:5], got); diff != "" {
		t.Errorf("images without addons (-want +got):\n%s", diff)
	}
	s.Config.Addons.KubeProxy.Disabled, s.Config.Addons.CoreDNS.Disabled = false, false

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
