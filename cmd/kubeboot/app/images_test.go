package app

import (
	"bufio"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestImagesListMatchesTheManifests: `images list -o json` names exactly
// the images of the manifests init writes, read from a dry run's output.
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
	if len(fromManifests) != 4 {
		t.Fatalf("found %d images in the dry run's manifests, want the 4 components': %v", len(fromManifests), fromManifests)
	}

	code, stdout, stderr = runCLI(t, "images", "list", "--root", root, "-o", "json")
	if code != 0 {
		t.Fatalf("images list: exit %d: %s", code, stderr)
	}
	var listed struct{ Images []string }
	if err := json.Unmarshal([]byte(stdout), &listed); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(fromManifests, listed.Images); diff != "" {
		t.Errorf("images list -o json (-manifests +listed):\n%s", diff)
	}
}
