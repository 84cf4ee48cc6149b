package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/inputfile"
)

// InvalidError reports every problem of a configuration file at once. Its
// exit code is 2, like any other usage error.
type InvalidError struct {
	// File is the configuration file, or "" for built-in defaults.
	File string
	// Problems are the individual errors, one per field.
	Problems []Problem
}

// Problem is one error in a configuration file.
type Problem struct {
	// Line is the line in the file, or 0 when unknown.
	Line int
	// Field is the field path, like networking.serviceSubnet.
	Field string
	// Message says what is wrong and how to fix it.
	Message string
}

// Error lists every problem, one per line, prefixed with the file and line.
func (e *InvalidError) Error() string {
	var b strings.Builder
	name := e.File
	if name == "" {
		name = "configuration"
	}
	fmt.Fprintf(&b, "invalid config %s:", name)
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		if p.Line > 0 {
			fmt.Fprintf(&b, "line %d: ", p.Line)
		}
		if p.Field != "" {
			b.WriteString(p.Field + ": ")
		}
		b.WriteString(p.Message)
	}
	return b.String()
}

// ExitCode makes invalid configuration exit with code 2.
func (e *InvalidError) ExitCode() int { return exit.Usage }

// Env is what loading a configuration file needs besides the file.
type Env struct {
	// Host supplies the defaults of this machine.
	Host Host
	// Kinds are the kinds of document the command takes; nil takes every
	// kind. A file of another kind is refused, naming the command that
	// takes it. No file at all stands for an empty document of the first
	// kind, which the defaults fill (the ClusterConfiguration's, for nil).
	Kinds []string
	// Worker is set for a worker's join only: its command line, whose
	// settings win over the WorkerConfiguration's, which must then say how
	// to discover the cluster. Without it, a WorkerConfiguration (read by
	// the commands that work on a worker rather than join it) may leave
	// its discovery to the join's command line.
	Worker *WorkerFlags
	// JoinDiscovery is set for a control-plane node's join: the discovery
	// settings of its command line, each of which wins over the
	// JoinConfiguration's join.discovery (made for them when the file has
	// none), before validation.
	JoinDiscovery *Discovery
	// JoinCertificateKey is set for a control-plane node's join from its
	// --certificate-key: it wins over join.certificateKey.
	JoinCertificateKey string
}

// kinds are the kinds of document env takes, the first one first.
func (env Env) kinds() []string {
	if len(env.Kinds) > 0 {
		return env.Kinds
	}
	return []string{KindClusterConfiguration, KindJoinConfiguration, KindWorkerConfiguration}
}

// Document is a loaded configuration: exactly one of its kinds is set,
// defaulted and valid.
type Document struct {
	// Cluster is a ClusterConfiguration, the input of `kubeboot init`.
	Cluster *ClusterConfiguration
	// Join is a JoinConfiguration, the input of `kubeboot join
	// --control-plane`.
	Join *JoinConfiguration
	// Worker is a WorkerConfiguration, the input of a worker's `kubeboot
	// join`.
	Worker *WorkerConfiguration
}

// Kind is the kind of the document.
func (d Document) Kind() string {
	switch {
	case d.Join != nil:
		return KindJoinConfiguration
	case d.Worker != nil:
		return KindWorkerConfiguration
	}
	return KindClusterConfiguration
}

// ControlPlane is the ClusterConfiguration of a control-plane node's
// document: the ClusterConfiguration, or the JoinConfiguration's; nil for
// a worker's.
func (d Document) ControlPlane() *ClusterConfiguration {
	if d.Join != nil {
		return &d.Join.ClusterConfiguration
	}
	return d.Cluster
}

// Load reads the configuration file at path once, refuses it unless it
// holds exactly one document of a kind env takes, and decodes that
// document strictly, defaults and validates it. An empty path means an
// empty document of env's first kind: for a ClusterConfiguration, the
// defaults alone; for a worker's join, its command line alone.
func Load(path string, env Env) (Document, error) {
	if path == "" {
		return decodeKind(path, env.kinds()[0], nil, env)
	}
	data, err := readConfig(path)
	if err != nil {
		return Document{}, err
	}
	return Parse(path, data, env)
}

// Parse is Load of a file's contents that are in memory already, such as
// the node files `kubeboot config fleet` makes before it writes them;
// file names them in errors.
func Parse(file string, data []byte, env Env) (Document, error) {
	doc, kind, err := parse(file, data, env.kinds())
	if err != nil {
		return Document{}, err
	}
	return decodeKind(file, kind, doc, env)
}

// decodeKind decodes, defaults and validates doc, of kind, from file.
func decodeKind(path, kind string, doc *yaml.Node, env Env) (Document, error) {
	switch kind {
	case KindJoinConfiguration:
		j, err := loadJoin(path, doc, env)
		return Document{Join: j}, err
	case KindWorkerConfiguration:
		w, err := loadWorker(path, doc, env)
		return Document{Worker: w}, err
	}
	c, err := loadCluster(path, doc, env.Host)
	return Document{Cluster: c}, err
}

// readConfig reads a configuration file, refusing what is not a regular
// file of at most inputfile.ConfigLimit bytes and inputfile.ConfigNodes
// nodes, before anything decodes it.
func readConfig(path string) ([]byte, error) {
	data, err := inputfile.ReadYAML(path, inputfile.ConfigLimit, inputfile.ConfigNodes)
	if err != nil {
		// A config that cannot be read is a usage error, like one that is invalid.
		return nil, &InvalidError{File: path, Problems: []Problem{{Message: "cannot read the file: " + err.Error()}}}
	}
	return data, nil
}

// loadCluster decodes, defaults and validates the ClusterConfiguration
// document doc of file, or without a document the defaults alone.
func loadCluster(file string, doc *yaml.Node, host Host) (*ClusterConfiguration, error) {
	c := New()
	var errs field.ErrorList
	if doc != nil {
		if err := decode(file, doc, c); err != nil {
			return nil, err
		}
		errs = checkExplicitZeros(c, doc)
	}
	SetDefaults(c, host)
	if err := validated(file, doc, append(errs, Validate(c)...)); err != nil {
		return nil, err
	}
	return c, nil
}

// validated turns field errors into an InvalidError, or nil without any,
// using doc (when known) to give each field its line.
func validated(file string, doc *yaml.Node, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	inv := &InvalidError{File: file}
	for _, e := range errs {
		msg := e.ErrorBody()
		inv.Problems = append(inv.Problems, Problem{Line: lineOf(doc, e.Field), Field: e.Field, Message: msg})
	}
	return inv
}

// parse splits data, read from file, into its documents and accepts
// exactly one, of one of kinds, without duplicate keys: it returns that
// document, not yet decoded, and its kind. A file of another kubeboot kind
// is an error that names the command that takes it.
func parse(file string, data []byte, kinds []string) (*yaml.Node, string, error) {
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, "", &InvalidError{File: file, Problems: []Problem{{Line: yamlErrorLine(err), Message: err.Error()}}}
	}
	if len(docs) == 0 {
		return nil, "", &InvalidError{File: file, Problems: []Problem{{Message: "no " + strings.Join(kinds, " or ") + " document: the file is empty"}}}
	}
	if kind := kindOf(docs[0]); slices.Contains(kinds, kind) {
		kinds = []string{kind}
	}
	var problems []Problem
	for i, doc := range docs {
		problems = append(problems, checkTypeMeta(doc, i, len(docs), kinds)...)
		problems = append(problems, duplicateKeys(doc, nil)...)
	}
	if len(problems) > 0 {
		return nil, "", &InvalidError{File: file, Problems: problems}
	}
	return docs[0], kinds[0], nil
}

// kindOf is the kubeboot kind a document declares, or "".
func kindOf(doc *yaml.Node) string {
	if doc.Kind != yaml.MappingNode || scalar(doc, "apiVersion") != APIVersion {
		return ""
	}
	return scalar(doc, "kind")
}

// decode decodes the document doc of file into out, strictly.
func decode(file string, doc *yaml.Node, out any) error {
	if problems := decodeDocument(doc, out); len(problems) > 0 {
		return &InvalidError{File: file, Problems: problems}
	}
	return nil
}

func splitDocuments(data []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(n.Content) > 0 && n.Content[0].Kind != 0 && !isNull(n.Content[0]) {
			docs = append(docs, n.Content[0])
		}
	}
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

var yamlLine = regexp.MustCompile(`line (\d+)`)

// yamlErrorLine extracts the line number from a YAML syntax error.
func yamlErrorLine(err error) int {
	m := yamlLine.FindStringSubmatch(err.Error())
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// commandOf names the command that reads each kind, for a file given to
// the wrong one.
var commandOf = map[string]string{
	KindClusterConfiguration: "kubeboot init",
	KindJoinConfiguration:    "kubeboot join --control-plane",
	KindWorkerConfiguration:  "kubeboot join",
}

// checkTypeMeta accepts exactly one document, of our apiVersion and one
// of kinds.
func checkTypeMeta(doc *yaml.Node, index, total int, kinds []string) []Problem {
	where := ""
	if total > 1 {
		where = fmt.Sprintf("document %d: ", index+1)
	}
	if doc.Kind != yaml.MappingNode {
		return []Problem{{Line: doc.Line, Message: where + "expected a mapping with apiVersion and kind"}}
	}
	apiVersion, kind := scalar(doc, "apiVersion"), scalar(doc, "kind")
	want := strings.Join(kinds, " or ")
	switch {
	case apiVersion == APIVersion && !slices.Contains(kinds, kind) && commandOf[kind] != "":
		return []Problem{{Line: doc.Line, Message: fmt.Sprintf("%sa %s is for `%s`; this command takes a %s", where, kind, commandOf[kind], want)}}
	case apiVersion != APIVersion || !slices.Contains(kinds, kind):
		return []Problem{{Line: doc.Line, Message: fmt.Sprintf("%sunsupported document apiVersion %q kind %q: want apiVersion %s and kind %s",
			where, apiVersion, kind, APIVersion, want)}}
	case index > 0:
		return []Problem{{Line: doc.Line, Message: where + "more than one " + want + ": keep exactly one per file"}}
	}
	return nil
}

func scalar(m *yaml.Node, key string) string {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1].Value
		}
	}
	return ""
}

// duplicateKeys finds repeated mapping keys anywhere in the document at
// path (nil for the root); the JSON conversion would otherwise keep one of
// them silently. The path is a linked list, spelled out only for a
// duplicate, so that a deep document costs memory linear in its size.
func duplicateKeys(n *yaml.Node, path *field.Path) []Problem {
	var problems []Problem
	switch n.Kind {
	case yaml.MappingNode:
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			child := field.NewPath(k.Value)
			if path != nil {
				child = path.Child(k.Value)
			}
			if first, ok := seen[k.Value]; ok {
				problems = append(problems, Problem{Line: k.Line, Field: child.String(),
					Message: fmt.Sprintf("duplicate key (first set on line %d): remove one", first)})
			} else {
				seen[k.Value] = k.Line
			}
			problems = append(problems, duplicateKeys(n.Content[i+1], child)...)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			problems = append(problems, duplicateKeys(c, path.Index(i))...)
		}
	}
	return problems
}

// decodeDocument converts the document to JSON with the same YAML rules as
// the rest of Kubernetes, then decodes it case-sensitively, reporting
// unknown fields and type mismatches with their paths.
func decodeDocument(doc *yaml.Node, out any) []Problem {
	raw, err := yaml.Marshal(doc)
	if err == nil {
		raw, err = sigsyaml.YAMLToJSON(raw)
	}
	if err != nil {
		return []Problem{{Line: doc.Line, Message: err.Error()}}
	}
	strict, err := sigsjson.UnmarshalStrict(raw, out)
	if err != nil {
		return []Problem{typeProblem(doc, raw, err, out)}
	}
	var problems []Problem
	for _, e := range strict {
		path := e.Error()
		var fe sigsjson.FieldError
		if errors.As(e, &fe) {
			path = fe.FieldPath()
		}
		problems = append(problems, Problem{Line: lineOf(doc, path), Field: path, Message: "unknown field: check its spelling and indentation against `kubeboot config print-defaults`"})
	}
	return problems
}

// typeProblem describes a type mismatch. The standard library decoder gives
// the field path of the first mismatch; the case-sensitive decoder that
// found it does not expose it.
func typeProblem(doc *yaml.Node, raw []byte, err error, out any) Problem {
	var te *json.UnmarshalTypeError
	fresh := reflect.New(reflect.TypeOf(out).Elem()).Interface()
	if errors.As(json.Unmarshal(raw, fresh), &te) && te.Field != "" {
		msg := fmt.Sprintf("wrong type: got %s, want %s", te.Value, te.Type)
		if te.Value == "bool" && te.Type.Kind().String() == "string" {
			msg += ` (YAML reads yes/no/on/off/y/n as booleans: quote the value)`
		}
		return Problem{Line: lineOf(doc, te.Field), Field: te.Field, Message: msg}
	}
	if p := unmarshalerProblem(doc, reflect.TypeOf(out).Elem(), nil); p != nil {
		return *p
	}
	return Problem{Line: doc.Line, Message: err.Error()}
}

var (
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	durationType    = reflect.TypeFor[metav1.Duration]()
)

// unmarshalerProblem finds the field, at path in a value of type t that n
// sets, whose own decoder (a json.Unmarshaler, such as a duration's)
// refuses its value, and says so with the field; nil when none does.
func unmarshalerProblem(n *yaml.Node, t reflect.Type, path *field.Path) *Problem {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		raw, err := yaml.Marshal(n)
		if err == nil {
			raw, err = sigsyaml.YAMLToJSON(raw)
		}
		if err == nil {
			err = reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(raw)
		}
		if err == nil {
			return nil
		}
		msg := err.Error()
		if t == durationType {
			msg += fmt.Sprintf(": want a duration like 90s, 4m or 24h, of at most %dh", math.MaxInt64/int64(time.Hour))
		}
		return &Problem{Line: n.Line, Field: path.String(), Message: msg}
	}
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if f, ok := jsonField(t, n.Content[i].Value); ok {
				if p := unmarshalerProblem(n.Content[i+1], f.Type, childPath(path, n.Content[i].Value)); p != nil {
					return p
				}
			}
		}
	case (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && n.Kind == yaml.SequenceNode:
		for i, c := range n.Content {
			if p := unmarshalerProblem(c, t.Elem(), path.Index(i)); p != nil {
				return p
			}
		}
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if p := unmarshalerProblem(n.Content[i+1], t.Elem(), childPath(path, n.Content[i].Value)); p != nil {
				return p
			}
		}
	}
	return nil
}

// childPath is path's child name, or name's path at the root (nil).
func childPath(path *field.Path, name string) *field.Path {
	if path == nil {
		return field.NewPath(name)
	}
	return path.Child(name)
}

// jsonField is the field of struct type t that JSON key name decodes
// into, looking into inlined and embedded structs.
func jsonField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case tag == "-":
		case tag == "" && (f.Anonymous || opts == "inline"):
			inner := f.Type
			if inner.Kind() == reflect.Pointer {
				inner = inner.Elem()
			}
			if inner.Kind() == reflect.Struct {
				if g, ok := jsonField(inner, name); ok {
					return g, true
				}
			}
		case tag == name || tag == "" && f.Name == name:
			return f, true
		}
	}
	return reflect.StructField{}, false
}

var pathStep = regexp.MustCompile(`[^.\[\]]+|\[\d+\]`)

// valueAt finds the value node of a field path in the YAML tree, or nil.
func valueAt(doc *yaml.Node, path string) *yaml.Node {
	n := doc
	for _, step := range pathStep.FindAllString(path, -1) {
		next := child(n, step)
		if next == nil {
			return nil
		}
		n = next.value
	}
	return n
}

// lineOf finds the line of a field path like apiServer.extraArgs[0].name in
// the YAML tree, or the deepest known parent's line, or 0 without a tree.
func lineOf(doc *yaml.Node, path string) int {
	if doc == nil {
		return 0
	}
	n, line := doc, 0
	for _, step := range pathStep.FindAllString(path, -1) {
		next := child(n, step)
		if next == nil {
			break
		}
		line, n = next.keyLine, next.value
	}
	return line
}

type located struct {
	keyLine int
	value   *yaml.Node
}

func child(n *yaml.Node, step string) *located {
	if strings.HasPrefix(step, "[") {
		i, _ := strconv.Atoi(strings.Trim(step, "[]"))
		if n.Kind == yaml.SequenceNode && i < len(n.Content) {
			return &located{n.Content[i].Line, n.Content[i]}
		}
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == step {
			return &located{n.Content[i].Line, n.Content[i+1]}
		}
	}
	return nil
}
