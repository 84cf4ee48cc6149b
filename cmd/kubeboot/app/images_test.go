package app

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

// TestImagesListMatchesTheManifests: `images list -o json` names exactly
// the images of the manifests init writes, read from a dry run's output,
// then the default addons' images, kube-proxy's and CoreDNS's.
func TestImagesListMatchesTheManifests(t *testing.T) {
	root := t.TempDir()
	code, stdout, stderr := runCLI(t, "init", "--dry-run", "--root", root, "-o", "json")
	if code != 0 {
		t.Fatalf("init --dry-run: exit %d: %s", code, stderr)
	}
	var fromManifests []string
	lines := bufio.NewScanner(strings.NewReader(stdout))
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		var event struct{ Content string }
		if err := json.Unmarshal(lines.Bytes(), &event); err != nil {
			t.Fatalf("event %q: %v", lines.Text(), err)
		}
		if event.Content == "" {
			continue
		}
		var pod corev1.Pod
		if err := yaml.Unmarshal([]byte(event.Content), &pod); err != nil {
			t.Fatal(err)
		}
		for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
			if !slices.Contains(fromManifests, c.Image) {
				fromManifests = append(fromManifests, c.Image)
			}
		}
	}
	if len(fromManifests) != 5 {
		t.Fatalf("found %d images in the dry run's manifests, want the 4 components' and the CSR approver's: %v", len(fromManifests), fromManifests)
	}

	code, stdout, stderr = runCLI(t, "images", "list", "--root", root, "-o", "json")
	if code != 0 {
		t.Fatalf("images list: exit %d: %s", code, stderr)
	}
	var listed struct{ Images []string }
	if err := json.Unmarshal([]byte(stdout), &listed); err != nil {
		t.Fatal(err)
	}
	want := slices.Concat(fromManifests, []string{config.DefaultFlannelPluginImage, config.DefaultFlannelImage, "registry.k8s.io/kube-proxy:" + config.DefaultKubernetesVersion,
		config.DefaultCoreDNSImage(config.DefaultImageRepository, config.DefaultKubernetesVersion)})
	if diff := cmp.Diff(want, listed.Images); diff != "" {
		t.Errorf("images list -o json (-manifests and addons +listed):\n%s", diff)
	}
}

// TestImagesPull runs images pull against a CRI image service: every
// image present is reported so, and one the runtime cannot get fails the
// command, naming it.
func TestImagesPull(t *testing.T) {
	pull := func(t *testing.T, binaries ...string) (int, string, string) {
		dir := t.TempDir()
		sock := filepath.Join(dir, "cri.sock")
		phasestest.ServeImages(t, sock, binaries...)
		cfg := filepath.Join(dir, "node.yaml")
		text := "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nkubelet:\n  containerRuntimeEndpoint: unix://" + sock + "\n"
		if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return runCLI(t, "images", "pull", "--config", cfg, "-o", "json")
	}
	code, stdout, stderr := pull(t, "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "pause", "flannel", "flannel-cni-plugin", "kube-proxy", "coredns")
	if code != 0 {
		t.Fatalf("images pull with every image: exit %d: %s%s", code, stdout, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var last struct{ Result pullResult }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if !last.Result.OK || len(last.Result.Present) != 9 || len(last.Result.Pulled) != 0 {
		t.Errorf("result %+v, want 9 images present", last.Result)
	}

	code, stdout, _ = pull(t, "etcd", "kube-apiserver", "kube-controller-manager", "pause", "flannel", "flannel-cni-plugin", "kube-proxy", "coredns")
	if code != 1 || !strings.Contains(stdout, `pull image \"registry.k8s.io/kube-scheduler:`) {
		t.Errorf("images pull of an image the runtime cannot get: exit %d:\n%s", code, stdout)
	}
}
