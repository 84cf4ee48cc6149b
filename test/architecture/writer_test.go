package architecture

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// writerPackage is where the one durable write lives: the only product
// code that makes temp files or renames.
const writerPackage = "internal/atomicfile"

// renamers are, by import path, the functions that make a temp file or
// rename one into place: outside writerPackage, product code writes
// through atomicfile instead (Create, WriteFile, Move), so that the temp
// file, fsync, rename and directory fsync exist once.
var renamers = map[string][]string{
	"os":                    {"Rename", "CreateTemp"},
	"io/ioutil":             {"TempFile"},
	"syscall":               {"Rename", "Renameat"},
	"golang.org/x/sys/unix": {"Rename", "Renameat", "Renameat2"},
}

// TestOneDurableWrite: no product (non-test) Go file outside
// internal/atomicfile renames a file or makes a temp file itself; it writes
// through internal/atomicfile, whose sequence of temp file, fsync,
// rename and directory fsync is then the only one in the tree.
func TestOneDurableWrite(t *testing.T) {
	root := repoRoot(t)
	var problems []string
	allowed := 0 // uses inside writerPackage, to show the walk finds them
	for _, pkg := range productPackages(t, root) {
		inWriter := pkg == writerPackage
		for _, use := range renamerUses(t, filepath.Join(root, pkg)) {
			if inWriter {
				allowed++
				continue
			}
			problems = append(problems, strings.TrimPrefix(use, root+string(filepath.Separator))+": write through internal/atomicfile (Create, WriteFile, Move) instead, so that the temp file, fsync, rename and directory fsync exist once")
		}
	}
	if allowed == 0 {
		t.Fatalf("found no os.Rename or os.CreateTemp in %s, which holds the one durable write: is the walk broken?", writerPackage)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// renamerUses lists, as file:line: pkg.Func, every reference to a renamer
// (a call or a function value) in the non-test Go files of dir.
func renamerUses(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var uses []string
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		uses = append(uses, fileRenamerUses(fset, f)...)
	}
	return uses
}

// fileRenamerUses is renamerUses for one parsed file: a selector pkg.Func
// whose pkg is the name the file imports a renamer's package by.
func fileRenamerUses(fset *token.FileSet, f *ast.File) []string {
	funcs := map[string][]string{} // by the name the file uses
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		names, ok := renamers[path]
		if !ok {
			continue
		}
		name := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		funcs[name] = names
	}
	var uses []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		x, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		for _, fn := range funcs[x.Name] {
			if sel.Sel.Name == fn {
				uses = append(uses, fset.Position(sel.Pos()).String()+": "+x.Name+"."+fn)
			}
		}
		return true
	})
	return uses
}

// TestRenamerUsesParse pins the finder on a small file: a call, a
// function value and a renamed import are found; a method of the same
// name and another package's Rename are not.
func TestRenamerUsesParse(t *testing.T) {
	src := `package p

import (
	"os"
	sys "golang.org/x/sys/unix"
	"example.com/other"
)

func f(w interface{ Rename(a, b string) error }) {
	_ = os.Rename("a", "b")
	mk := os.CreateTemp
	_ = sys.Renameat2
	_ = w.Rename("a", "b")
	_ = other.Rename
	_, _ = mk, os.MkdirTemp
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	got := fileRenamerUses(fset, f)
	want := []string{"p.go:10:6: os.Rename", "p.go:11:8: os.CreateTemp", "p.go:12:6: sys.Renameat2"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
