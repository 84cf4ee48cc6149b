// Package addonmanifests owns the user's own manifests (addons.manifests):
// reading them into unstructured objects and checking them before
// anything is applied. Read reads the files (through inputfile, with a
// size limit) and refuses what no apply could take: a document that does
// not parse, an object without apiVersion, kind or metadata.name, the
// same object twice. Resolve settles, against the cluster's kinds and
// namespaces that its caller hands it, where each object goes and in
// which order. Every refusal is an *exit.UsageError (exit 2) naming the
// file, the document and the object, and the fix. It applies nothing and
// prints nothing.
package addonmanifests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/inputfile"
)

// FileLimit caps one manifest file. The manifests of a CNI or an operator,
// CRDs and all, are a few hundred KiB; 4 MiB, a configuration file's
// limit, leaves room for ten times that while keeping the decoders'
// memory, several times the input, modest. A larger file is most likely
// the wrong one; a real bundle that large can be split into files.
const FileLimit = 4 << 20

// Field is the configuration field every refusal names.
const Field = "addons.manifests"

// extensions are the file name endings read from a directory of
// addons.manifests; its other files and its subdirectories are left alone.
var extensions = []string{".yaml", ".yml", ".json"}

// Object is one object of the user's manifests, with where it was read.
type Object struct {
	// File is the node path of the file it was read from.
	File string
	// Document is the index of its document in the file, from 1.
	Document int
	// Item is its index in its document's List, from 1; 0 when the
	// document is the object itself.
	Item int
	// Object is the object as written; Resolve settles its namespace.
	Object *unstructured.Unstructured
}

// String names the object as kubectl does: "Kind namespace/name", or
// "Kind name" for one without a namespace.
func (o Object) String() string {
	return describe(o.Object)
}

// Source says where the object was read: "FILE, document N", with ",
// item M" for an item of a List.
func (o Object) Source() string {
	s := fmt.Sprintf("%s, document %d", o.File, o.Document)
	if o.Item > 0 {
		s += fmt.Sprintf(", item %d", o.Item)
	}
	return s
}

// GroupVersionKind is the object's apiVersion and kind.
func (o Object) GroupVersionKind() schema.GroupVersionKind {
	return o.Object.GroupVersionKind()
}

// describe names u as kubectl does, and says what it lacks to be named.
func describe(u *unstructured.Unstructured) string {
	kind, name := u.GetKind(), u.GetName()
	if kind == "" {
		kind = "object"
	}
	if name == "" {
		return kind + " without a name"
	}
	if ns := u.GetNamespace(); ns != "" {
		return kind + " " + ns + "/" + name
	}
	return kind + " " + name
}

// Read reads the manifests at paths, node paths, each a file or a
// directory whose .yaml, .yml and .json files are read in name order. host maps a
// node path to this machine's (the identity on the node itself). The
// objects come in the order of paths, files and documents, a List's items
// in its place. It refuses, with every problem found listed, a path that
// cannot be read, a file over FileLimit, a document that does not parse or
// is not an object, an object without apiVersion, kind or metadata.name,
// and the same object twice.
func Read(paths []string, host func(string) string) ([]Object, error) {
	var objs []Object
	var p problems
	for _, path := range paths {
		files, err := filesOf(path, host)
		if err != nil {
			p.add("%s", err)
			continue
		}
		for _, file := range files {
			read, err := readFile(file, host(file))
			if err != nil {
				p.add("%s", err)
				continue
			}
			objs = append(objs, read...)
		}
	}
	p.addAll(duplicates(objs))
	if err := p.err(); err != nil {
		return nil, err
	}
	return objs, nil
}

// filesOf is path itself when it is a file, or, when it is a directory,
// its files with one of the extensions, in name order, as node paths.
func filesOf(path string, host func(string) string) ([]string, error) {
	info, err := os.Stat(host(path))
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w: fix the path or remove it", path, err)
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(host(path))
	if err != nil {
		return nil, fmt.Errorf("cannot read the directory %s: %w", path, err)
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() && slices.Contains(extensions, strings.ToLower(filepath.Ext(e.Name()))) {
			files = append(files, filepath.Join(path, e.Name()))
		}
	}
	return files, nil
}

// readFile reads the objects of the file at node path name, hostPath on
// this machine.
func readFile(name, hostPath string) ([]Object, error) {
	data, err := inputfile.ReadYAML(hostPath, FileLimit, inputfile.ManifestNodes)
	switch {
	case errors.Is(err, inputfile.ErrTooLarge) || errors.Is(err, inputfile.ErrTooComplex):
		return nil, fmt.Errorf("%s: %w: split it into smaller files", name, err)
	case err != nil:
		return nil, fmt.Errorf("%s: %w: give a regular YAML or JSON file", name, err)
	}
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []Object
	for index := 1; ; index++ {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s, document %d does not parse: %w: fix the YAML", name, index, err)
		}
		read, err := decodeDocument(name, index, doc)
		if err != nil {
			return nil, err
		}
		objs = append(objs, read...)
	}
}

// decodeDocument decodes one document of file: nothing for an empty one,
// the items of a List, or the one object it is.
func decodeDocument(file string, index int, doc []byte) ([]Object, error) {
	where := fmt.Sprintf("%s, document %d", file, index)
	data, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, fmt.Errorf("%s does not parse: %w: fix the YAML", where, err)
	}
	var value any
	if err := utiljson.Unmarshal(data, &value); err != nil {
		return nil, fmt.Errorf("%s does not parse: %w: fix the JSON", where, err)
	}
	if value == nil {
		return nil, nil // only comments, or nothing: kubectl skips it too
	}
	fields, ok := value.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s is not an object but %s: write one object (apiVersion, kind, metadata) per document", where, typeName(value))
	}
	obj := Object{File: file, Document: index, Object: &unstructured.Unstructured{Object: fields}}
	if isList(obj.Object) {
		return listItems(obj)
	}
	if err := check(obj); err != nil {
		return nil, err
	}
	return []Object{obj}, nil
}

// isList says whether u is a List (kind List, or any kind ending in List,
// with items), which kubectl apply expands into its items.
func isList(u *unstructured.Unstructured) bool {
	_, hasItems := u.Object["items"]
	return hasItems && strings.HasSuffix(u.GetKind(), "List")
}

// listItems expands a List into its items, each checked as an object of
// its own; a List inside a List is refused.
func listItems(list Object) ([]Object, error) {
	items, ok := list.Object.Object["items"].([]any)
	if !ok {
		return nil, fmt.Errorf("%s (%s): items is not a list: give the objects as a list, or one per document", list.Source(), list.Object.GetKind())
	}
	var objs []Object
	for i, item := range items {
		obj := Object{File: list.File, Document: list.Document, Item: i + 1}
		fields, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s is not an object but %s: give each item as an object (apiVersion, kind, metadata)", obj.Source(), typeName(item))
		}
		obj.Object = &unstructured.Unstructured{Object: fields}
		if isList(obj.Object) {
			return nil, fmt.Errorf("%s (%s) is a List inside a List: give its items in the outer List, or in a document of their own", obj.Source(), obj.Object.GetKind())
		}
		if err := check(obj); err != nil {
			return nil, err
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

// check refuses an object that a server-side apply cannot take: without
// an apiVersion the API server understands, a kind, or a name.
func check(o Object) error {
	u := o.Object
	where := fmt.Sprintf("%s (%s)", o.Source(), describe(u))
	apiVersion, _, _ := unstructured.NestedString(u.Object, "apiVersion")
	kind, _, _ := unstructured.NestedString(u.Object, "kind")
	switch {
	case apiVersion == "":
		return fmt.Errorf("%s: no apiVersion: every object needs one, such as v1 or apps/v1", where)
	case kind == "":
		return fmt.Errorf("%s: no kind: every object needs one, such as ConfigMap or Deployment", where)
	}
	if _, err := schema.ParseGroupVersion(apiVersion); err != nil {
		return fmt.Errorf("%s: apiVersion %q is not group/version (or v1 for the core group): fix it", where, apiVersion)
	}
	if _, ok := u.Object["metadata"].(map[string]any); !ok {
		return fmt.Errorf("%s: no metadata: every object needs metadata.name", where)
	}
	if name, _, _ := unstructured.NestedString(u.Object, "metadata", "name"); name == "" {
		return fmt.Errorf("%s: no metadata.name: server-side apply finds an object by its name (metadata.generateName cannot be applied): give it one", where)
	}
	return nil
}

// typeName names what a JSON value is, for a user.
func typeName(v any) string {
	switch v.(type) {
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	default:
		return "a number"
	}
}

// identity tells objects apart as the API server does: by group, kind,
// namespace and name (not by version: two versions of one kind are one
// object).
type identity struct {
	group, kind, namespace, name string
}

// identityOf is o's identity, with its namespace as o says it.
func identityOf(o Object) identity {
	gvk := o.GroupVersionKind()
	return identity{gvk.Group, gvk.Kind, o.Object.GetNamespace(), o.Object.GetName()}
}

// duplicates refuses each object given a second time, naming both places.
func duplicates(objs []Object) []string {
	first := map[identity]Object{}
	var out []string
	for _, o := range objs {
		id := identityOf(o)
		if prev, ok := first[id]; ok {
			out = append(out, fmt.Sprintf("%s (%s): given twice, first in %s: keep one of them", o.Source(), o, prev.Source()))
			continue
		}
		first[id] = o
	}
	return out
}

// problems collects refusals, so that one run names every bad object.
type problems []string

// add adds one refusal.
func (p *problems) add(format string, args ...any) {
	*p = append(*p, fmt.Sprintf(format, args...))
}

// addAll adds refusals.
func (p *problems) addAll(msgs []string) {
	*p = append(*p, msgs...)
}

// err is nil without a refusal, else the usage error listing them all.
func (p problems) err() error {
	switch len(p) {
	case 0:
		return nil
	case 1:
		return &exit.UsageError{Msg: Field + ": " + p[0] + "; nothing was applied"}
	}
	return &exit.UsageError{Msg: fmt.Sprintf("%s: %d problems, nothing was applied:\n  %s", Field, len(p), strings.Join(p, "\n  "))}
}
