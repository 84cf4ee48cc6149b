package architecture

import (
	"go/build"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// commandImports are the only modules outside the standard library that
// cmd/ may import: cobra and pflag for the commands and flags, x/term for
// the terminal, and client-go's clientset type, which cmd/kubeboot/app
// builds once and hands to the libraries. Everything else a command
// needs (etcd's client, S3, cfssl, the API machinery) is a library's
// business: cmd/ wires commands, it holds no logic.
var commandImports = []string{
	"github.com/spf13/cobra",
	"github.com/spf13/pflag",
	"golang.org/x/term",
	"k8s.io/client-go/kubernetes",
}

// TestCommandsOnlyWire: cmd/ imports kubeboot's own packages, the
// standard library and commandImports, nothing else.
func TestCommandsOnlyWire(t *testing.T) {
	root := repoRoot(t)
	var checked int
	for _, pkg := range productPackages(t, root) {
		if pkg != "cmd" && !strings.HasPrefix(pkg, "cmd"+string(filepath.Separator)) {
			continue
		}
		checked++
		p, err := build.Default.ImportDir(filepath.Join(root, pkg), 0)
		if err != nil {
			t.Fatalf("read package %s: %v", pkg, err)
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module) || !strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") || slices.Contains(commandImports, imp) {
				continue
			}
			t.Errorf("%s imports %s: cmd/ wires commands only; put what needs it in a library package under internal/ (or add it to commandImports if it is wiring)", pkg, imp)
		}
	}
	if checked < 2 {
		t.Fatalf("checked %d packages under cmd/: is the walk broken?", checked)
	}
}
