package nodefile_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/nodefile"
)

// TestSetKubernetesVersion: the node's file moves to a release with every
// other byte kept, its mode too; a file without the line gets one after
// its kind; what cannot be moved in place is refused and left as it was.
func TestSetKubernetesVersion(t *testing.T) {
	for _, tc := range []struct {
		name, file, want, err string
		changed               bool
	}{
		{"replaced", "apiVersion: kubeboot.io/v1alpha1\nkind: JoinConfiguration\n# the fleet's\nkubernetesVersion: v1.35.4 # pinned\nnode: {name: cp2}\n",
			"apiVersion: kubeboot.io/v1alpha1\nkind: JoinConfiguration\n# the fleet's\nkubernetesVersion: v1.36.3\nnode: {name: cp2}\n", "", true},
		{"already there", "kind: ClusterConfiguration\nkubernetesVersion: v1.36.3\n", "kind: ClusterConfiguration\nkubernetesVersion: v1.36.3\n", "", false},
		{"added after kind", "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nnode: {name: cp1}\n",
			"apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nkubernetesVersion: v1.36.3\nnode: {name: cp1}\n", "", true},
		{"no kind", "node: {name: cp1}\n", "", "no top-level kind line", false},
		{"two lines", "kind: ClusterConfiguration\nkubernetesVersion: v1.35.4\n---\nkubernetesVersion: v1.35.4\n", "", "2 top-level kubernetesVersion lines", false},
		{"a flow mapping", "{kind: ClusterConfiguration, kubernetesVersion: v1.35.4}\n", "", "no top-level kind line", false},
		{"not YAML", "kind: ClusterConfiguration\nkubernetesVersion: v1.35.4\nnode: [\n", "", "cannot be moved to v1.36.3 in place", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "node.yaml")
			if err := os.WriteFile(path, []byte(tc.file), 0o640); err != nil {
				t.Fatal(err)
			}
			changed, err := nodefile.SetKubernetesVersion(path, "v1.36.3")
			got, _ := os.ReadFile(path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), path) || string(got) != tc.file {
					t.Fatalf("err %v, want one naming %s and saying %q, the file left as it was; the file:\n%s", err, path, tc.err, got)
				}
				return
			}
			if err != nil || changed != tc.changed || string(got) != tc.want {
				t.Fatalf("changed %v, err %v; the file:\n%s\nwant changed %v:\n%s", changed, err, got, tc.changed, tc.want)
			}
			if info, _ := os.Stat(path); info.Mode().Perm() != 0o640 {
				t.Errorf("mode %v, want the file's own 0640", info.Mode().Perm())
			}
		})
	}
}
