package staticpod

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	yamlv2 "go.yaml.in/yaml/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// yamlTraps finds the plain scalars that YAML resolves to a type the Pod
// cannot take at that place: above all the YAML 1.1 booleans (yes, no, on,
// off, y, n, in any case the spec allows), as in `path: n`, and numbers
// written where a string belongs, as in an env `value: 8080`. The
// kubelet's YAML library follows YAML 1.1, so it converts those to JSON
// booleans and numbers and then fails to decode them, with a message that
// never shows the scalar the author wrote. It returns nil when data has no
// such scalar.
func yamlTraps(data []byte) []Finding {
	var root yamlNode
	if yamlv2.Unmarshal(data, &root) != nil {
		return nil
	}
	var r report
	podType := reflect.TypeFor[corev1.Pod]()
	for _, key := range slices.Sorted(maps.Keys(root.mapping)) {
		if t, ok := jsonField(podType, key); ok {
			walkYAML(&r, root.mapping[key], t, field.NewPath(key))
		}
	}
	return r
}

// walkYAML walks a YAML node together with the Go type it decodes into and
// reports every scalar that the type cannot take.
func walkYAML(r *report, n *yamlNode, t reflect.Type, path *field.Path) {
	if n == nil { // a null value
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case n.mapping != nil && t.Kind() == reflect.Struct:
		for _, key := range slices.Sorted(maps.Keys(n.mapping)) {
			if ft, ok := jsonField(t, key); ok {
				walkYAML(r, n.mapping[key], ft, path.Child(key))
			}
		}
	case n.mapping != nil && t.Kind() == reflect.Map:
		for _, key := range slices.Sorted(maps.Keys(n.mapping)) {
			walkYAML(r, n.mapping[key], t.Elem(), path.Key(key))
		}
	case n.sequence != nil && t.Kind() == reflect.Slice:
		for i, item := range n.sequence {
			walkYAML(r, item, t.Elem(), path.Index(i))
		}
	default:
		if msg := scalarTrap(n, t.Kind()); msg != "" {
			r.add(path, "%s", msg)
		}
	}
}

// scalarTrap explains why a scalar cannot decode into a Go value of kind,
// or returns "" when it can or when the scalar is not a trap.
func scalarTrap(n *yamlNode, kind reflect.Kind) string {
	if kind == reflect.Interface {
		return ""
	}
	switch n.value.(type) {
	case bool:
		switch {
		case kind == reflect.Bool:
			return ""
		case !strings.EqualFold(n.raw, "true") && !strings.EqualFold(n.raw, "false"):
			return fmt.Sprintf("YAML 1.1 reads the bare %s as the boolean %v, which the kubelet cannot decode here: quote it (%q)", n.raw, n.value, n.raw)
		case kind == reflect.String:
			return fmt.Sprintf("YAML reads the bare %s as a boolean, which the kubelet cannot decode into a string: quote it (%q)", n.raw, n.raw)
		}
	case int, int64, uint64, float64:
		if kind == reflect.String {
			return fmt.Sprintf("YAML reads the bare %s as a number, which the kubelet cannot decode into a string: quote it (%q)", n.raw, n.raw)
		}
	}
	return ""
}

// jsonField returns the type of the field of struct t that JSON key name
// decodes into, looking through embedded ",inline" structs (such as the
// ProbeHandler inside a Probe) as encoding/json does.
func jsonField(t reflect.Type, name string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tagName, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && tagName == "" && f.Type.Kind() == reflect.Struct {
			if ft, ok := jsonField(f.Type, name); ok {
				return ft, true
			}
			continue
		}
		if tagName == name {
			return f.Type, true
		}
	}
	return nil, false
}

// yamlNode is a YAML document that keeps each scalar as written next to
// the value YAML 1.1 resolves it to: a trap is a string as written that
// resolves to something else.
type yamlNode struct {
	mapping  map[string]*yamlNode
	sequence []*yamlNode
	raw      string
	value    any
}

// UnmarshalYAML implements yamlv2.Unmarshaler.
func (n *yamlNode) UnmarshalYAML(unmarshal func(any) error) error {
	// Probe the node's kind with targets that do not decode the children,
	// so that every node is decoded once whatever the document's depth.
	if unmarshal(&[]skipNode{}) == nil {
		return unmarshal(&n.sequence)
	}
	if unmarshal(&map[string]skipNode{}) == nil {
		return unmarshal(&n.mapping)
	}
	if err := unmarshal(&n.value); err != nil {
		return err
	}
	// yaml.v2 stores a scalar's text as written when the target is a
	// string, even when the scalar resolves to a boolean.
	return unmarshal(&n.raw)
}

// skipNode accepts any YAML node without decoding it.
type skipNode struct{}

// UnmarshalYAML implements yamlv2.Unmarshaler.
func (*skipNode) UnmarshalYAML(func(any) error) error { return nil }
