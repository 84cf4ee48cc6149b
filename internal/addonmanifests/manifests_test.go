package addonmanifests

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/exit"
)

// onHost is Read's host mapping on the node itself.
func onHost(path string) string { return path }

// write writes files (name: content) into a new directory and returns it.
func write(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// names lists objs as "String @ Source".
func names(objs []Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.String()+" @ "+filepath.Base(o.Source()))
	}
	return out
}

// TestReadDirectoryAndFiles: a directory's YAML and JSON files are read
// in name order (not its other files nor its subdirectories), each
// document an object, a List expanded, empty documents skipped; a file
// named beside the directory comes after it, in the order of paths.
func TestReadDirectoryAndFiles(t *testing.T) {
	dir := write(t, map[string]string{
		"b.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: demo}\n---\n# only a comment\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: demo}\n",
		"a.yml":        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n",
		"c.json":       `{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1"}}, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c2"}}]}`,
		"README.md":    "not a manifest",
		"sub/d.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ignored}\n",
		"extra/e.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: e, namespace: demo}\n",
	})
	objs, err := Read([]string{dir, filepath.Join(dir, "extra", "e.yaml")}, onHost)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"Namespace demo @ a.yml, document 1",
		"ConfigMap demo/b @ b.yaml, document 1",
		"Deployment demo/web @ b.yaml, document 3",
		"ConfigMap c1 @ c.json, document 1, item 1",
		"ConfigMap c2 @ c.json, document 1, item 2",
		"ConfigMap demo/e @ e.yaml, document 1",
	}
	if got := names(objs); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("read\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestReadRefuses: each bad input is refused, exit 2, naming the file,
// the document and the object, and the fix; nothing else is returned.
func TestReadRefuses(t *testing.T) {
	big := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata:\n  blob: \"" + strings.Repeat("x", FileLimit) + "\"\n"
	tests := []struct {
		name, content string
		want          []string
	}{
		{"does not parse", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: [\n", []string{"m.yaml, document 2 does not parse", "fix the YAML"}},
		{"duplicate key", "apiVersion: v1\nkind: ConfigMap\nkind: Secret\nmetadata: {name: a}\n", []string{"m.yaml, document 1 does not parse", `key "kind" already set`}},
		{"not an object", "- a\n- b\n", []string{"m.yaml, document 1 is not an object but a list"}},
		{"no kind", "apiVersion: v1\nmetadata: {name: web}\n", []string{"m.yaml, document 1 (object web): no kind: every object needs one"}},
		{"no apiVersion", "kind: ConfigMap\nmetadata: {name: web}\n", []string{"m.yaml, document 1 (ConfigMap web): no apiVersion"}},
		{"bad apiVersion", "apiVersion: a/b/c\nkind: ConfigMap\nmetadata: {name: web}\n", []string{`apiVersion "a/b/c" is not group/version`}},
		{"no name", "apiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: web-}\n", []string{"m.yaml, document 1 (ConfigMap without a name): no metadata.name", "generateName cannot be applied"}},
		{"no metadata", "apiVersion: v1\nkind: ConfigMap\n", []string{"(ConfigMap without a name): no metadata"}},
		{"item without a kind", `{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}, {"apiVersion": "v1", "metadata": {"name": "b"}}]}`, []string{"m.yaml, document 1, item 2 (object b): no kind"}},
		{"List in a List", `{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "List", "items": []}]}`, []string{"item 1 (List) is a List inside a List"}},
		{"twice", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: demo}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: demo}\n", []string{"m.yaml, document 2 (ConfigMap demo/a): given twice, first in", "m.yaml, document 1: keep one"}},
		{"too large", big, []string{"m.yaml: read ", "file too large", "the limit is 4 MiB", "split it into smaller files"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := write(t, map[string]string{"m.yaml": tt.content})
			objs, err := Read([]string{filepath.Join(dir, "m.yaml")}, onHost)
			checkRefused(t, objs, err, append(tt.want, "addons.manifests: ", "nothing was applied"))
		})
	}
	t.Run("missing path", func(t *testing.T) {
		objs, err := Read([]string{"/nonexistent/manifests"}, onHost)
		checkRefused(t, objs, err, []string{"cannot read /nonexistent/manifests", "fix the path or remove it"})
	})
	t.Run("every problem at once", func(t *testing.T) {
		dir := write(t, map[string]string{"a.yaml": "kind: ConfigMap\nmetadata: {name: a}\n", "b.yaml": "apiVersion: v1\nmetadata: {name: b}\n"})
		objs, err := Read([]string{dir}, onHost)
		checkRefused(t, objs, err, []string{"2 problems", "a.yaml, document 1 (ConfigMap a): no apiVersion", "b.yaml, document 1 (object b): no kind"})
	})
}

// checkRefused wants err a usage error (exit 2) saying each of want, and
// no object.
func checkRefused(t *testing.T, objs []Object, err error, want []string) {
	t.Helper()
	var usage *exit.UsageError
	if !errors.As(err, &usage) || exit.Code(err) != exit.Usage {
		t.Fatalf("got %v (exit %d), want a usage error, exit 2", err, exit.Code(err))
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the error does not say %q:\n%v", w, err)
		}
	}
	if objs != nil {
		t.Errorf("a refusal returned objects: %v", names(objs))
	}
}

// TestReadMapsNodePaths: paths are node paths, read where host maps them,
// and errors name the node path.
func TestReadMapsNodePaths(t *testing.T) {
	root := write(t, map[string]string{"etc/manifests/a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n", "etc/bad.yaml": "kind: ConfigMap\nmetadata: {name: b}\n"})
	host := func(p string) string { return filepath.Join(root, p) }
	objs, err := Read([]string{"/etc/manifests"}, host)
	if err != nil || len(objs) != 1 || objs[0].File != "/etc/manifests/a.yaml" {
		t.Fatalf("read %v, %v; want ConfigMap a from /etc/manifests/a.yaml", objs, err)
	}
	_, err = Read([]string{"/etc/bad.yaml"}, host)
	if err == nil || !strings.Contains(err.Error(), "/etc/bad.yaml, document 1") || strings.Contains(err.Error(), root) {
		t.Errorf("got %v, want the node path named", err)
	}
}
