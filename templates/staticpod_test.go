package templates

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kubeboot/kubeboot/internal/staticpod"
)

// TestGoldenManifestsPassStaticPodValidation runs the kubelet's rules, as
// package staticpod knows them, on every golden manifest.
func TestGoldenManifestsPassStaticPodValidation(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no golden manifests (run go test ./templates -update)")
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		res := staticpod.Validate(file, data, "node1")
		if !res.Accepted {
			t.Errorf("%s rejected: %v", file, res.Errors)
		}
		for _, w := range res.Warnings {
			t.Errorf("%s: warning: %v", file, w)
		}
	}
}
