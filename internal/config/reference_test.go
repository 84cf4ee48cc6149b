package config

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// configReference is the generated configuration reference.
const configReference = "../../docs/reference/config.md"

// referenceKind is a kind of document a user writes: its kind, the Go type
// that holds it and the directory of that type's package.
type referenceKind struct {
	kind, goType, dir string
}

// referenceKinds are the documents the reference describes, in its order.
// The lab's LabCluster is read from ../lab and the Fleet from ../fleet,
// whose packages this one may not import (it is below them in the
// layers); their kinds are lab.ClusterKind and fleet.Kind.
var referenceKinds = []referenceKind{
	{KindClusterConfiguration, "ClusterConfiguration", "."},
	{KindJoinConfiguration, "JoinConfiguration", "."},
	{KindWorkerConfiguration, "WorkerConfiguration", "."},
	{"LabCluster", "Cluster", "../lab"},
	{"Fleet", "Description", "../fleet"},
}

// simpleType is how the reference shows a type of another package.
func simpleType(name string) (string, bool) {
	switch name {
	case "metav1.Duration":
		return "duration", true
	case "corev1.TaintEffect", "corev1.HostPathType":
		return "string", true
	}
	return "", false
}

// sourceTypes are the type declarations of a package's source files, by
// name.
type sourceTypes map[string]*sourceType

// sourceType is one type declaration and its doc comment.
type sourceType struct {
	spec *ast.TypeSpec
	doc  string
}

// parseTypes reads the type declarations of the package in dir, tests
// aside.
func parseTypes(dir string) (sourceTypes, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	types := sourceTypes{}
	fset := token.NewFileSet()
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.TYPE {
				continue
			}
			for _, spec := range gen.Specs {
				ts := spec.(*ast.TypeSpec)
				doc := ts.Doc
				if doc == nil && len(gen.Specs) == 1 {
					doc = gen.Doc
				}
				types[ts.Name.Name] = &sourceType{spec: ts, doc: oneLine(doc)}
			}
		}
	}
	return types, nil
}

// oneLine is a doc comment as one line of a Markdown table: what would be
// markup (<name>, *bool) is escaped outside code spans, and | everywhere.
func oneLine(doc *ast.CommentGroup) string {
	if doc == nil {
		return ""
	}
	markup := strings.NewReplacer("<", "&lt;", ">", "&gt;", "*", `\*`)
	parts := strings.Split(strings.Join(strings.Fields(doc.Text()), " "), "`")
	for i := 0; i < len(parts); i += 2 {
		parts[i] = markup.Replace(parts[i])
	}
	return strings.ReplaceAll(strings.Join(parts, "`"), "|", `\|`)
}

// referenceWriter writes the reference: each kind a section, each struct
// it holds a subsection, written once, where it is first met.
type referenceWriter struct {
	out     bytes.Buffer
	written map[string]bool
	errs    []string
}

// generateConfigReference is the reference of kinds as their source
// says: docs/reference/config.md for referenceKinds.
func generateConfigReference(kinds []referenceKind) ([]byte, error) {
	w := &referenceWriter{written: map[string]bool{}}
	w.out.WriteString("<!-- Generated from the Go types' doc comments by `go test ./internal/config -run TestConfigReferenceIsCurrent -update`; do not edit. -->\n\n" +
		"# Configuration reference: every field\n\n" +
		"Every field of the documents kubeboot reads, in source order, with the doc comment of its Go type's field. " +
		"Defaults, rules and examples are in [the configuration guide](../configuration.md).\n")
	for _, k := range kinds {
		types, err := parseTypes(k.dir)
		if err != nil {
			return nil, err
		}
		w.kind(k, types)
	}
	if len(w.errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(w.errs, "\n"))
	}
	return w.out.Bytes(), nil
}

// kind writes the section of k, then the subsections of its structs.
func (w *referenceWriter) kind(k referenceKind, types sourceTypes) {
	t, ok := types[k.goType]
	if !ok {
		w.errs = append(w.errs, fmt.Sprintf("%s: no type %s", k.dir, k.goType))
		return
	}
	w.written[k.goType] = true
	fmt.Fprintf(&w.out, "\n## %s\n\n%s\n\n", k.kind, w.typeDoc(k.dir, k.goType, t))
	w.out.WriteString("| field | type | meaning |\n|---|---|---|\n")
	fmt.Fprintf(&w.out, "| `apiVersion` | string | `%s` |\n| `kind` | string | `%s` |\n", APIVersion, k.kind)
	nested := w.fields(k.dir, k.goType, t, types)
	w.structs(k.dir, nested, types)
}

// structs writes the subsections of names and of the structs they hold,
// depth first.
func (w *referenceWriter) structs(dir string, names []string, types sourceTypes) {
	for _, name := range names {
		if w.written[name] {
			continue
		}
		w.written[name] = true
		t := types[name]
		fmt.Fprintf(&w.out, "\n### %s\n\n%s\n\n", name, w.typeDoc(dir, name, t))
		w.out.WriteString("| field | type | meaning |\n|---|---|---|\n")
		w.structs(dir, w.fields(dir, name, t, types), types)
	}
}

// typeDoc is the doc comment of the type name, or a failure naming it.
func (w *referenceWriter) typeDoc(dir, name string, t *sourceType) string {
	if t.doc == "" {
		w.errs = append(w.errs, fmt.Sprintf("%s: type %s has no doc comment", dir, name))
	}
	return t.doc
}

// fields writes a row for each field of the struct t, in source order, and
// returns the structs of its package it holds.
func (w *referenceWriter) fields(dir, name string, t *sourceType, types sourceTypes) []string {
	st, ok := t.spec.Type.(*ast.StructType)
	if !ok {
		w.errs = append(w.errs, fmt.Sprintf("%s: %s is not a struct", dir, name))
		return nil
	}
	var nested []string
	for _, f := range st.Fields.List {
		jsonName := jsonTag(f)
		if jsonName == "-" || jsonName == "apiVersion" || jsonName == "kind" {
			continue
		}
		if len(f.Names) == 0 {
			w.embedded(dir, name, f, types, &nested)
			continue
		}
		if !f.Names[0].IsExported() {
			continue
		}
		field := name + "." + f.Names[0].Name
		if jsonName == "" {
			w.errs = append(w.errs, fmt.Sprintf("%s: %s has no json name", dir, field))
		}
		doc := oneLine(f.Doc)
		if doc == "" {
			w.errs = append(w.errs, fmt.Sprintf("%s: %s has no doc comment", dir, field))
		}
		fmt.Fprintf(&w.out, "| `%s` | %s | %s |\n", jsonName, w.typeName(dir, f.Type, types, &nested), doc)
	}
	return nested
}

// embedded writes the row of an embedded struct, whose fields are the
// embedding one's; metav1.TypeMeta's are every section's first rows.
func (w *referenceWriter) embedded(dir, name string, f *ast.Field, types sourceTypes, nested *[]string) {
	if sel, ok := f.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "TypeMeta" {
		return
	}
	ident, ok := f.Type.(*ast.Ident)
	if !ok || types[ident.Name] == nil {
		w.errs = append(w.errs, fmt.Sprintf("%s: %s embeds %s, which the reference cannot show", dir, name, exprString(f.Type)))
		return
	}
	*nested = append(*nested, ident.Name)
	fmt.Fprintf(&w.out, "| (inline) | %s | every field of %s, at this level |\n", link(ident.Name), ident.Name)
}

// typeName is the type expr as the reference shows it: a struct of the
// package as a link to its subsection (added to nested), another type of
// the package as its underlying type, pointers as what they point to.
func (w *referenceWriter) typeName(dir string, expr ast.Expr, types sourceTypes, nested *[]string) string {
	switch e := expr.(type) {
	case *ast.StarExpr:
		return w.typeName(dir, e.X, types, nested)
	case *ast.ArrayType:
		return "[]" + w.typeName(dir, e.Elt, types, nested)
	case *ast.MapType:
		return "map[" + w.typeName(dir, e.Key, types, nested) + "]" + w.typeName(dir, e.Value, types, nested)
	case *ast.Ident:
		t, ok := types[e.Name]
		if !ok {
			return e.Name
		}
		if _, isStruct := t.spec.Type.(*ast.StructType); isStruct {
			*nested = append(*nested, e.Name)
			return link(e.Name)
		}
		return w.typeName(dir, t.spec.Type, types, nested)
	case *ast.SelectorExpr:
		if simple, ok := simpleType(exprString(e)); ok {
			return simple
		}
	}
	w.errs = append(w.errs, fmt.Sprintf("%s: add %s to simpleType", dir, exprString(expr)))
	return exprString(expr)
}

// link is a link to the subsection of the struct name.
func link(name string) string {
	return "[" + name + "](#" + strings.ToLower(name) + ")"
}

// exprString is a type expression as Go writes it.
func exprString(expr ast.Expr) string {
	if sel, ok := expr.(*ast.SelectorExpr); ok {
		return exprString(sel.X) + "." + sel.Sel.Name
	}
	if ident, ok := expr.(*ast.Ident); ok {
		return ident.Name
	}
	return fmt.Sprintf("%T", expr)
}

// jsonTag is the name in a field's json tag: "" without one.
func jsonTag(f *ast.Field) string {
	if f.Tag == nil {
		return ""
	}
	tag, err := strconv.Unquote(f.Tag.Value)
	if err != nil {
		return ""
	}
	name, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ",")
	return name
}

// TestConfigReferenceIsCurrent keeps docs/reference/config.md, generated
// from the configuration types' doc comments, in step with them; -update
// rewrites it. It fails naming any field or type without a doc comment.
func TestConfigReferenceIsCurrent(t *testing.T) {
	want, err := generateConfigReference(referenceKinds)
	if err != nil {
		t.Fatalf("the configuration reference cannot be generated:\n%v", err)
	}
	if *update {
		if err := os.MkdirAll(filepath.Dir(configReference), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(configReference, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(configReference)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("docs/reference/config.md is stale (or missing); run `go test ./internal/config -run TestConfigReferenceIsCurrent -update`")
	}
}

// TestConfigReferenceNamesUndocumentedFields checks that the generator
// refuses a type or field without a doc comment, naming each.
func TestConfigReferenceNamesUndocumentedFields(t *testing.T) {
	dir := t.TempDir()
	src := strings.Join([]string{
		"package x",
		"// Doc is documented.",
		"type Doc struct {",
		"	// A is documented.",
		"	A string `json:\"a\"`",
		"	B Bare `json:\"b\"`",
		"}",
		"type Bare struct {",
		"	C int `json:\"c\"`",
		"}",
	}, "\n")
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := generateConfigReference([]referenceKind{{"Doc", "Doc", dir}})
	if err == nil {
		t.Fatal("a reference of undocumented fields was generated")
	}
	for _, missing := range []string{"Doc.B has no doc comment", "type Bare has no doc comment", "Bare.C has no doc comment"} {
		if !strings.Contains(err.Error(), missing) {
			t.Errorf("the error does not say %q:\n%v", missing, err)
		}
	}
	if strings.Contains(err.Error(), "Doc.A") {
		t.Errorf("the error names the documented field Doc.A:\n%v", err)
	}
}
