package architecture

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoHiddenSeams keeps the product's dependencies explicit: no init()
// in product code, no package variable of function type (a seam tests
// would swap), and no package variable that anything assigns after its
// declaration, in the product or its tests. What a run depends on is
// passed in: app.Main builds it once.
func TestNoHiddenSeams(t *testing.T) {
	root := repoRoot(t)
	pkgs := productPackages(t, root)
	vars := map[string]map[string]bool{} // by import path
	var problems []string
	for _, pkg := range pkgs {
		found, pkgVars := seams(t, filepath.Join(root, pkg), pkg)
		problems = append(problems, found...)
		vars[module+pkg] = pkgVars
	}
	problems = append(problems, foreignAssignments(t, root, vars)...)
	if len(problems) == 0 && len(vars[module+"internal/config"]) == 0 {
		t.Fatal("found no package variable in internal/config: is the parse broken?")
	}
	for _, problem := range problems {
		t.Error(problem)
	}
}

// foreignAssignments finds, in every Go file of the module, assignments
// to another package's variable (pkg.Var = ...), vars being each product
// package's variables by import path.
func foreignAssignments(t *testing.T, root string, vars map[string]map[string]bool) []string {
	t.Helper()
	var problems []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel, _ := filepath.Rel(root, path); rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin" || rel == filepath.Join("test", "tools")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		imported := map[string]map[string]bool{} // by the name the file uses
		for _, imp := range f.Imports {
			target, _ := strconv.Unquote(imp.Path.Value)
			if v, ok := vars[target]; ok {
				name := target[strings.LastIndex(target, "/")+1:]
				if imp.Name != nil {
					name = imp.Name.Name
				}
				imported[name] = v
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if as, ok := n.(*ast.AssignStmt); ok {
				for _, lhs := range as.Lhs {
					sel, ok := lhs.(*ast.SelectorExpr)
					if !ok {
						continue
					}
					if x, ok := sel.X.(*ast.Ident); ok && imported[x.Name][sel.Sel.Name] {
						problems = append(problems, fset.Position(sel.Pos()).String()+": assigns the package variable "+x.Name+"."+sel.Sel.Name+": pass the value in instead")
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return problems
}

// seams lists the hidden seams of the package in dir, and its package
// variables.
func seams(t *testing.T, dir, pkg string) ([]string, map[string]bool) {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var product, tests []*ast.File
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(e.Name(), "_test.go") {
			tests = append(tests, f)
		} else {
			product = append(product, f)
		}
	}
	var problems []string
	vars := map[string]bool{}
	for _, f := range product {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.Name == "init" {
					problems = append(problems, fset.Position(d.Pos()).String()+": func init() in product code: set up explicitly, where the program starts")
				}
			case *ast.GenDecl:
				if d.Tok != token.VAR {
					continue
				}
				for _, spec := range d.Specs {
					vs := spec.(*ast.ValueSpec)
					_, funcType := vs.Type.(*ast.FuncType)
					for i, name := range vs.Names {
						vars[name.Name] = true
						_, funcLit := valueAt(vs, i).(*ast.FuncLit)
						if funcType || funcLit {
							problems = append(problems, fset.Position(name.Pos()).String()+": package variable "+name.Name+" of function type in "+pkg+": pass the dependency in")
						}
					}
				}
			}
		}
	}
	for _, f := range append(product, tests...) {
		problems = append(problems, assignments(fset, f, vars)...)
	}
	return problems, vars
}

// valueAt is the i-th value of vs, or nil.
func valueAt(vs *ast.ValueSpec, i int) ast.Expr {
	if i < len(vs.Values) {
		return vs.Values[i]
	}
	return nil
}

// assignments finds, in f, assignments to the package variables vars
// outside their declaration. A function's own variable of the same name
// (declared in it, or a parameter) is not one.
func assignments(fset *token.FileSet, f *ast.File, vars map[string]bool) []string {
	var problems []string
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		locals := map[string]bool{}
		for _, list := range []*ast.FieldList{fn.Recv, fn.Type.Params, fn.Type.Results} {
			if list == nil {
				continue
			}
			for _, field := range list.List {
				for _, n := range field.Names {
					locals[n.Name] = true
				}
			}
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			switch s := n.(type) {
			case *ast.AssignStmt:
				for _, lhs := range s.Lhs {
					id, ok := lhs.(*ast.Ident)
					if !ok {
						continue
					}
					if s.Tok == token.DEFINE {
						locals[id.Name] = true
					} else if vars[id.Name] && !locals[id.Name] {
						problems = append(problems, fset.Position(id.Pos()).String()+": assigns the package variable "+id.Name+": pass the value in instead")
					}
				}
			case *ast.ValueSpec:
				for _, id := range s.Names {
					locals[id.Name] = true
				}
			case *ast.RangeStmt:
				for _, e := range []ast.Expr{s.Key, s.Value} {
					if id, ok := e.(*ast.Ident); ok && s.Tok == token.DEFINE {
						locals[id.Name] = true
					}
				}
			}
			return true
		})
	}
	return problems
}
