// Package architecture keeps docs/architecture.md true: every package of
// the product is on its map, and every import points down its layers.
package architecture

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const (
	module = "github.com/kubeboot/kubeboot/"
	doc    = "docs/architecture.md"
)

// repoRoot is the module's root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// productPackages lists the directories (relative to root) that hold a Go
// package of the product: everything outside test/ with non-test Go files.
func productPackages(t *testing.T, root string) []string {
	t.Helper()
	var pkgs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "test" || d.Name() == "testdata" || (rel != "." && strings.HasPrefix(d.Name(), ".")) || d.Name() == "bin" {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			dir := filepath.Dir(rel)
			if !slices.Contains(pkgs, dir) {
				pkgs = append(pkgs, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// docLayers reads the numbered layer list between the doc's markers: the
// packages of each layer, top first.
func docLayers(t *testing.T, text string) map[string]int {
	t.Helper()
	start, end := strings.Index(text, "<!-- layers -->"), strings.Index(text, "<!-- /layers -->")
	if start < 0 || end < start {
		t.Fatalf("%s: no <!-- layers --> ... <!-- /layers --> list", doc)
	}
	layers := map[string]int{}
	item := regexp.MustCompile(`^([0-9]+)\. (.*)$`)
	for _, line := range strings.Split(text[start:end], "\n") {
		m := item.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		layer, _ := strconv.Atoi(m[1]) // the pattern allows digits only
		for _, pkg := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(m[2], -1) {
			layers[pkg[1]] = layer
		}
	}
	return layers
}

func TestArchitecture(t *testing.T) {
	root := repoRoot(t)
	data, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	layers := docLayers(t, text)
	pkgs := productPackages(t, root)
	if len(pkgs) < 10 {
		t.Fatalf("found only %d packages under %s: is the walk broken?", len(pkgs), root)
	}
	for _, pkg := range pkgs {
		if !strings.Contains(text, "| `"+pkg+"` |") {
			t.Errorf("%s: package %s is missing from the package map", doc, pkg)
		}
		layer, ok := layers[pkg]
		if !ok {
			t.Errorf("%s: package %s is in no layer of the dependency direction", doc, pkg)
			continue
		}
		p, err := build.Default.ImportDir(filepath.Join(root, pkg), 0)
		if err != nil {
			t.Fatalf("read package %s: %v", pkg, err)
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, "k8s.io/kubernetes") {
				t.Errorf("%s imports %s: the product never imports k8s.io/kubernetes", pkg, imp)
			}
			target, internal := strings.CutPrefix(imp, module)
			if !internal {
				continue
			}
			if to, ok := layers[target]; !ok || to <= layer {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports must point to a lower layer (%s)", pkg, layer, target, to, doc)
			}
		}
	}
	for pkg := range layers {
		if !slices.Contains(pkgs, pkg) {
			t.Errorf("%s names %s, which is not a package of the product", doc, pkg)
		}
	}
}

// TestLayersParse pins the parser on a small list, so that a broken parser
// cannot let every import pass.
func TestLayersParse(t *testing.T) {
	got := docLayers(t, "<!-- layers -->\n1. `a`\n2. `b`, `c/d`\n10. `e`\n<!-- /layers -->")
	want := map[string]int{"a": 1, "b": 2, "c/d": 2, "e": 10}
	for pkg, layer := range want {
		if got[pkg] != layer {
			t.Errorf("layer of %s = %d, want %d (all: %v)", pkg, got[pkg], layer, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("parsed %v, want %v", got, want)
	}
}
