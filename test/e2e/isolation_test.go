//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestIsolation runs a control plane whose scheduler manifest, patched,
// no longer mounts its kubeconfig. In a real container the scheduler
// cannot see the file and exits, and the wait's diagnosis names it and
// shows the end of its log; a runtime that ran the component as a plain
// host process would have let it read the file and become healthy.
func TestIsolation(t *testing.T) {
	alongside(t)
	n := newNode(t, "iso", "10.89.25.0/24")
	patches := filepath.Join(n.root, "patches")
	if err := os.MkdirAll(patches, 0o700); err != nil {
		t.Fatal(err)
	}
	// The first mount of the scheduler's container is its kubeconfig.
	patch := `[{"op": "remove", "path": "/spec/containers/0/volumeMounts/0"}]`
	if err := os.WriteFile(filepath.Join(patches, "kube-scheduler+json.yaml"), []byte(patch), 0o600); err != nil {
		t.Fatal(err)
	}
	const timeout = 40 * time.Second
	n.config = n.writeConfig(t, "kubeboot.yaml", map[string]any{"patchesDir": patches, "timeouts.controlPlane": timeout.String()})

	r := n.up(t)
	_, res, err := parseJSONOutput(r.stdout)
	if err != nil {
		t.Fatalf("init -o json output: %v\nstderr: %s", err, r.stderr)
	}
	if r.code != 4 || res.ExitCode != 4 {
		t.Fatalf("init with the scheduler's kubeconfig unmounted exited %d (result %d), want 4: %s", r.code, res.ExitCode, res.Error)
	}
	if want := components[:3]; !sameSet(res.Healthy, want) {
		t.Errorf("healthy %v, want %v: only the scheduler lacks a mount", res.Healthy, want)
	}
	kubeconfig := n.path("scheduler.conf")
	for _, want := range []string{"kube-scheduler: checked", "its container: exited with code", "| ", kubeconfig} {
		if !strings.Contains(res.Error, want) {
			t.Errorf("the diagnosis lacks %q:\n%s", want, res.Error)
		}
	}
	// The file is there on the host: only the container cannot see it.
	if _, err := os.Stat(kubeconfig); err != nil {
		t.Errorf("%s is missing on the host: %v", kubeconfig, err)
	}

	t.Run("preflight names the images the node's containerd lacks", func(t *testing.T) {
		mirror := n.writeConfig(t, "kubeboot-mirror.yaml", map[string]any{"imageRepository": "mirror.example/k8s"})
		r := n.kubeboot(t, "init", "phase", "preflight", "--config", mirror)
		for _, want := range []string{"ImagePull", "mirror.example/k8s/kube-apiserver:" + kubernetesVersion, "mirror.example/k8s/etcd:"} {
			if r.code != 1 || !strings.Contains(r.stderr, want) {
				t.Errorf("preflight with images the runtime lacks: exit %d, want 1 and %q in:\n%s", r.code, want, r.stderr)
			}
		}
		if strings.Contains(r.stderr, "registry.k8s.io/kube-apiserver") {
			t.Errorf("preflight names an image the runtime holds:\n%s", r.stderr)
		}
	})
}
