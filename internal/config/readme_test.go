package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestReferenceDocumentsEveryField keeps docs/configuration.md in step
// with the Go types: every field path must appear in it.
func TestReferenceDocumentsEveryField(t *testing.T) {
	readme, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range fieldPaths(reflect.TypeFor[ClusterConfiguration](), "") {
		leaf := path[strings.LastIndex(path, ".")+1:]
		parent := strings.TrimSuffix(path, "."+leaf)
		doc := string(readme)
		// Shared component fields may be documented once, as `parent.a`, `.b`.
		documented := strings.Contains(doc, "`"+path+"`") ||
			strings.Contains(doc, "`"+parent+".") && strings.Contains(doc, "`."+leaf+"`")
		if !documented {
			t.Errorf("docs/configuration.md does not document %s", path)
		}
	}
}

// TestReferenceDocumentsEveryWorkerField keeps docs/configuration.md's WorkerConfiguration
// table in step with its Go type: every field path must be in that section.
func TestReferenceDocumentsEveryWorkerField(t *testing.T) {
	readme, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## WorkerConfiguration")
	if !ok {
		t.Fatal("docs/configuration.md has no ## WorkerConfiguration section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, path := range fieldPaths(reflect.TypeFor[WorkerConfiguration](), "") {
		if !strings.Contains(section, "| `"+path+"` |") {
			t.Errorf("docs/configuration.md's WorkerConfiguration table has no row for %s", path)
		}
	}
}

// fieldPaths lists the JSON paths of the leaf fields of a struct type;
// slices of structs and other non-struct fields count as leaves.
func fieldPaths(t reflect.Type, prefix string) []string {
	var paths []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous {
			if f.Type.Kind() == reflect.Struct && f.Type.Name() != "TypeMeta" {
				paths = append(paths, fieldPaths(f.Type, prefix)...)
			}
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft.Name() != "Duration" {
			paths = append(paths, fieldPaths(ft, prefix+name+".")...)
			continue
		}
		paths = append(paths, prefix+name)
	}
	return paths
}
