package config

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/inputfile"
)

// TestLoadRefusesTooManyNodes checks that every loader refuses, as invalid
// config (exit 2) and before decoding, a file under the size limit whose
// millions of one-byte items would take gigabytes to decode, whatever kinds
// the command takes.
func TestLoadRefusesTooManyNodes(t *testing.T) {
	dir := t.TempDir()
	items := strings.Repeat("1,", inputfile.ConfigLimit/2-100)
	for _, tt := range []struct {
		name, kind string
		load       func(string) error
	}{
		{"init", KindClusterConfiguration, func(p string) error { _, err := loadInit(p, testHost); return err }},
		{"join", KindJoinConfiguration, func(p string) error { _, err := loadJoinFile(p, testHost); return err }},
		{"node", KindJoinConfiguration, func(p string) error { _, err := loadNode(p, testHost); return err }},
		{"worker", KindWorkerConfiguration, func(p string) error { _, err := loadWorkerJoin(p, testHost, WorkerFlags{}); return err }},
		{"any kind", KindWorkerConfiguration, func(p string) error { _, err := Load(p, Env{Host: testHost}); return err }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kind, load := tt.kind, tt.load
			path := filepath.Join(dir, tt.name+".yaml")
			text := "apiVersion: kubeboot.io/v1alpha1\nkind: " + kind + "\nkubelet:\n  extraConfig:\n    x: [" + items + "1]\n"
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			err := load(path)
			var inv *InvalidError
			if !errors.As(err, &inv) || exit.Code(err) != exit.Usage {
				t.Fatalf("got %v (exit %d), want an InvalidError, exit 2", err, exit.Code(err))
			}
			for _, want := range []string{path, "too many YAML nodes", "more than 50000 values"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
}

// TestDuplicateKeysDeepDocument checks that the duplicate-key walk costs
// memory linear in the document: it spelled out every node's path, so a
// document nested ten thousand deep cost hundreds of megabytes.
func TestDuplicateKeysDeepDocument(t *testing.T) {
	const depth = 5000
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("x: "+strings.Repeat("[", depth)+strings.Repeat("]", depth)), &doc); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	problems := duplicateKeys(doc.Content[0], nil)
	runtime.ReadMemStats(&after)
	if len(problems) != 0 {
		t.Fatalf("got %v", problems)
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 10<<20 {
		t.Errorf("the walk of a document %d deep allocated %d MiB", depth, allocated>>20)
	}
}
