//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// testCrictl is scenario 7: the real crictl sees the lab's containers
// in the node's containerd.
func testCrictl(t *testing.T, n *node) {
	table := n.crictl(t, "ps", "-a")
	if table.code != 0 {
		t.Fatalf("crictl ps -a exited %d: %s", table.code, table.stderr)
	}
	for _, c := range components {
		if !hasRow(table.stdout, c, "Running") {
			t.Errorf("crictl ps -a lists no Running %s:\n%s", c, table.stdout)
		}
	}

	ps := n.crictl(t, "ps", "-a", "-o", "json")
	var list struct {
		Containers []struct {
			ID       string `json:"id"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			State string `json:"state"`
		} `json:"containers"`
	}
	if err := json.Unmarshal([]byte(ps.stdout), &list); err != nil || ps.code != 0 {
		t.Fatalf("crictl ps -a -o json exited %d (%v): %s%s", ps.code, err, ps.stdout, ps.stderr)
	}
	ids := map[string]string{}
	for _, c := range list.Containers {
		if c.State == "CONTAINER_RUNNING" {
			ids[c.Metadata.Name] = c.ID
		}
	}

	pids := n.componentPids()
	for _, c := range components {
		id, ok := ids[c]
		if !ok {
			t.Errorf("crictl ps -a -o json has no running %s: %s", c, ps.stdout)
			continue
		}
		if err := checkInspect(t, n, c, id, pids[c]); err != nil {
			t.Errorf("crictl inspect %s: %v", c, err)
		}
	}

	if id := ids["kube-apiserver"]; id != "" {
		logs := n.crictl(t, "logs", id)
		// The API server logs to stderr, which crictl logs prints on stderr.
		out := logs.stdout + logs.stderr
		if logs.code != 0 || !strings.Contains(out, "Version: "+kubernetesVersion) || strings.Count(out, "\n") < 10 {
			t.Errorf("crictl logs %s exited %d and printed %d lines, want the API server's log with its version line:\n%s",
				id, logs.code, strings.Count(out, "\n"), testsupport.LastLines(out, 20))
		}
	}
}

// checkInspect checks crictl inspect's state, image and pid of a container.
func checkInspect(t *testing.T, n *node, component, id string, pid int) error {
	r := n.crictl(t, "inspect", id)
	var inspect struct {
		Status struct {
			ID    string `json:"id"`
			State string `json:"state"`
			Image struct {
				Image string `json:"image"`
			} `json:"image"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"status"`
		Info struct {
			PID int `json:"pid"`
		} `json:"info"`
	}
	if r.code != 0 {
		return fmt.Errorf("exit %d: %s", r.code, r.stderr)
	}
	if err := json.Unmarshal([]byte(r.stdout), &inspect); err != nil {
		return fmt.Errorf("decode the output: %w: %s", err, r.stdout)
	}
	pod, err := readManifest(n.manifestPath(component))
	if err != nil {
		return err
	}
	st := inspect.Status
	var problems []string
	if st.ID != id || st.Metadata.Name != component {
		problems = append(problems, fmt.Sprintf("id %s name %s, want %s %s", st.ID, st.Metadata.Name, id, component))
	}
	if st.State != "CONTAINER_RUNNING" {
		problems = append(problems, "state "+st.State+", want CONTAINER_RUNNING")
	}
	if want := pod.Spec.Containers[0].Image; st.Image.Image != want {
		problems = append(problems, fmt.Sprintf("image %s, want the manifest's %s", st.Image.Image, want))
	}
	// containerd runs in the machine, and names the process by its pid
	// there.
	if want := machinePid(t, pid); inspect.Info.PID == 0 || inspect.Info.PID != want {
		problems = append(problems, fmt.Sprintf("pid %d, want %d (the %s process, %d in the host's /proc)", inspect.Info.PID, want, component, pid))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

// testRejectedPatch is scenario 3: a patch that makes the API server
// reference a Secret is refused with exit 3, and nothing the kubelet runs
// changes.
func testRejectedPatch(t *testing.T, n *node) {
	patches := filepath.Join(n.root, "patches")
	if err := os.MkdirAll(patches, 0o700); err != nil {
		t.Fatal(err)
	}
	patch := "spec:\n  volumes:\n  - name: stolen\n    secret:\n      secretName: stolen\n"
	if err := os.WriteFile(filepath.Join(patches, "kube-apiserver+strategic.yaml"), []byte(patch), 0o600); err != nil {
		t.Fatal(err)
	}
	patched := n.writeConfig(t, "kubeboot-patched.yaml", map[string]any{"patchesDir": patches})

	before := manifestFiles(t, n)
	pids := n.componentPids()
	r := n.kubeboot(t, "init", "--config", patched, "-o", "json")
	_, res, err := parseJSONOutput(r.stdout)
	if err != nil {
		t.Fatalf("init -o json output: %v\nstderr: %s", err, r.stderr)
	}
	if r.code != 3 || res.ExitCode != 3 {
		t.Errorf("init with the secret patch exited %d (result %d), want 3: %s", r.code, res.ExitCode, res.Error)
	}
	if !strings.Contains(res.Error, "kube-apiserver") || !strings.Contains(res.Error, "secret") {
		t.Errorf("the error %q does not name kube-apiserver and the secret reference", res.Error)
	}
	if diff := snapshotDiff(before, manifestFiles(t, n)); len(diff) > 0 {
		t.Errorf("the rejected run changed the manifest dir:\n  %s", strings.Join(diff, "\n  "))
	}
	if readyz, err := n.kubectlErr(t, "get", "--raw", "/readyz"); err != nil || readyz != "ok" {
		t.Errorf("after the rejected run /readyz says %q (%v), want ok", readyz, err)
	}
	if now := n.componentPids(); now["kube-apiserver"] != pids["kube-apiserver"] {
		t.Errorf("the API server process changed from %d to %d", pids["kube-apiserver"], now["kube-apiserver"])
	}
}

// testComponentDown is scenario 5: with the scheduler's manifest gone, the
// kubelet stops it and the wait phase names it once its timeout passes.
func testComponentDown(t *testing.T, n *node) {
	const timeout = 20 * time.Second
	short := n.writeConfig(t, "kubeboot-short-wait.yaml", map[string]any{"timeouts.controlPlane": timeout.String()})
	manifest := n.manifestPath("kube-scheduler")
	if err := os.Rename(manifest, filepath.Join(n.root, "kube-scheduler.yaml.removed")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the kubelet stops kube-scheduler", func() error {
		if pid, ok := n.componentPids()["kube-scheduler"]; ok {
			return fmt.Errorf("kube-scheduler still runs as pid %d", pid)
		}
		pods, err := n.systemPods(t)
		if err != nil {
			return err
		}
		if _, ok := pods["kube-scheduler-"+n.name]; ok {
			return fmt.Errorf("mirror pod kube-scheduler-%s still exists", n.name)
		}
		return nil
	})

	r := n.kubeboot(t, "init", "phase", "wait", "--config", short, "-o", "json")
	_, res, err := parseJSONOutput(r.stdout)
	if err != nil {
		t.Fatalf("init phase wait -o json output: %v\nstderr: %s", err, r.stderr)
	}
	t.Logf("init phase wait with timeouts.controlPlane %s exited %d after %s", timeout, r.code, r.took.Round(time.Millisecond))
	if r.code != 4 || res.ExitCode != 4 {
		t.Errorf("init phase wait exited %d (result %d), want 4: %s", r.code, res.ExitCode, res.Error)
	}
	if margin := 10 * time.Second; r.took > timeout+margin {
		t.Errorf("init phase wait took %s, want at most the timeout %s + %s", r.took, timeout, margin)
	}
	if !strings.Contains(res.Error, "kube-scheduler") || !strings.Contains(r.stderr, "kube-scheduler") {
		t.Errorf("the diagnostic does not name kube-scheduler:\nresult error: %s\nstderr: %s", res.Error, r.stderr)
	}
	if want := components[:3]; !sameSet(res.Healthy, want) {
		t.Errorf("healthy %v, want %v: only kube-scheduler is down", res.Healthy, want)
	}
}

// manifestFiles snapshots only the manifest directory.
func manifestFiles(t *testing.T, n *node) map[string]fileState {
	t.Helper()
	all, err := n.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]fileState{}
	for path, f := range all {
		if filepath.Dir(path) == n.path("manifests") {
			files[path] = f
		}
	}
	if len(files) != len(staticPods) {
		t.Fatalf("the manifest dir holds %d files, want %d", len(files), len(staticPods))
	}
	return files
}

// readManifest decodes a static pod manifest.
func readManifest(path string) (*corev1.Pod, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(data, &pod); err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	if len(pod.Spec.Containers) == 0 {
		return nil, fmt.Errorf("%s has no container", path)
	}
	return &pod, nil
}

// hasRow says whether a table has a row with all these whole words.
func hasRow(table string, words ...string) bool {
	for _, line := range strings.Split(table, "\n") {
		fields := strings.Fields(line)
		found := 0
		for _, w := range words {
			for _, f := range fields {
				if f == w {
					found++
					break
				}
			}
		}
		if found == len(words) {
			return true
		}
	}
	return false
}
