//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDryRun is scenario 6: a dry run on a fresh node writes nothing and
// prints exactly the manifests a real run then writes.
func TestDryRun(t *testing.T) {
	alongside(t)
	n := newNode(t, "dry", "10.89.29.0/24")
	dry := n.kubeboot(t, "init", "--dry-run", "--config", n.config)
	if dry.code != 0 {
		t.Fatalf("init --dry-run exited %d:\n%s", dry.code, dry.stderr)
	}
	if _, err := os.Stat(n.dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the dry run created %s (stat: %v)", n.dir, err)
	}
	if entries, _ := os.ReadDir(n.root); len(entries) != 1 {
		t.Errorf("the dry run wrote next to its config: %v", entries)
	}
	printed, err := parseDryRun(dry.stdout)
	if err != nil {
		t.Fatalf("dry-run stdout: %v\n%s", err, dry.stdout)
	}
	var want []string
	for _, c := range staticPods {
		want = append(want, n.manifestPath(c))
	}
	if got := slices.Sorted(maps.Keys(printed)); !slices.Equal(got, want) {
		t.Fatalf("the dry run printed manifests %v, want %v", got, want)
	}

	run := n.kubeboot(t, "init", "--config", n.config, "--skip-phases", livePhases)
	if run.code != 0 {
		t.Fatalf("init --skip-phases %s exited %d:\n%s", livePhases, run.code, run.stderr)
	}
	entries, err := os.ReadDir(n.path("manifests"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(staticPods) {
		t.Errorf("the real run wrote %d entries in the manifest dir, want %d: %v", len(entries), len(staticPods), entries)
	}
	for _, path := range want {
		written, err := os.ReadFile(path)
		if err != nil {
			t.Error(err)
			continue
		}
		if diff := cmp.Diff(printed[path], string(written)); diff != "" {
			t.Errorf("%s: the dry run printed something else than the real run wrote (-printed +written):\n%s", path, diff)
		}
	}
}

// parseDryRun splits a dry run's stdout, a sequence of
// "---\n# <path>\n<content>", into content by path; nothing else may be there.
func parseDryRun(stdout string) (map[string]string, error) {
	manifests := map[string]string{}
	if !strings.HasPrefix(stdout, "---\n# ") {
		return nil, fmt.Errorf("stdout does not start with a manifest header")
	}
	for _, doc := range strings.Split(stdout, "---\n# ")[1:] {
		path, content, ok := strings.Cut(doc, "\n")
		if !ok || path == "" {
			return nil, fmt.Errorf("a manifest header without content: %q", doc)
		}
		if _, dup := manifests[path]; dup {
			return nil, fmt.Errorf("%s printed twice", path)
		}
		manifests[path] = content
	}
	return manifests, nil
}
