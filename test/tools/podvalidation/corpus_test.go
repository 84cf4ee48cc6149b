package podvalidation

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// mutant is one pod of the corpus: a rendered pod with one change.
type mutant struct {
	// name says which base pod, which field and which value, such as
	// `etcd: spec.activeDeadlineSeconds = 0`.
	name string
	pod  *corev1.Pod
}

// locator finds the value at one path inside a copy of the base pod,
// allocating nil pointers and empty slices on the way, so that a mutation
// can reach fields that the base pod leaves unset.
type locator func(root reflect.Value) reflect.Value

// maxSynthetic is how many unset pointers or empty lists one path may pass
// through: with 2, `spec.securityContext.runAsUser` and
// `spec.dnsConfig.options[0].name` are reached from a pod that sets
// neither.
const maxSynthetic = 2

// many is the length of the over-long lists: more than every list limit a
// pod has (32 DNS searches, 16 supplemental-group-like lists, ...) that
// does not need thousands of items.
const many = 65

// oneOfTypes are the structs of which exactly one field is set. Reaching a
// field of one of them clears its siblings, so that the mutation is about
// that field and not about two sources at once.
var oneOfTypes = []reflect.Type{
	reflect.TypeFor[corev1.VolumeSource](),
	reflect.TypeFor[corev1.VolumeProjection](),
	reflect.TypeFor[corev1.ProbeHandler](),
	reflect.TypeFor[corev1.LifecycleHandler](),
	reflect.TypeFor[corev1.EnvVarSource](),
}

// skippedTypes are not walked: times, which a manifest rarely sets and
// which validation ignores.
var skippedTypes = []reflect.Type{
	reflect.TypeFor[metav1.Time](),
	reflect.TypeFor[*metav1.Time](),
}

// generator walks a base pod and collects its mutants.
type generator struct {
	label string
	base  *corev1.Pod
	out   []mutant
}

// mutants returns every mutation of base that the walk finds, each named
// with label and the field's path.
func mutants(label string, base *corev1.Pod) []mutant {
	g := &generator{label: label, base: base}
	root := func(r reflect.Value) reflect.Value { return r }
	g.walk(reflect.ValueOf(base).Elem(), "", root, 0)
	return g.out
}

// emit adds the mutant whose value at loc is set by set.
func (g *generator) emit(path, what string, loc locator, set func(reflect.Value)) {
	pod := g.base.DeepCopy()
	set(loc(reflect.ValueOf(pod).Elem()))
	g.out = append(g.out, mutant{name: fmt.Sprintf("%s: %s = %s", g.label, path, what), pod: pod})
}

// emitValue adds the mutant whose value at loc is v.
func (g *generator) emitValue(path string, loc locator, v reflect.Value) {
	what := fmt.Sprintf("%#v", v.Interface())
	if len(what) > 60 {
		what = what[:60] + "..."
	}
	g.emit(path, what, loc, func(t reflect.Value) { t.Set(v) })
}

// walk emits the mutations of v, the value at path (located by loc), and
// walks into it. synthetic counts the unset pointers and empty lists the
// path passed through.
func (g *generator) walk(v reflect.Value, path string, loc locator, synthetic int) {
	t := v.Type()
	if slices.Contains(skippedTypes, t) || path == "status" || path == "metadata.managedFields" {
		return
	}
	switch t {
	case reflect.TypeFor[resource.Quantity]():
		for _, q := range []string{"-1", "0", "1m", "1Ei"} {
			g.emitValue(path, loc, reflect.ValueOf(resource.MustParse(q)))
		}
		return
	case reflect.TypeFor[intstr.IntOrString]():
		for _, p := range []intstr.IntOrString{
			intstr.FromInt32(-1), intstr.FromInt32(0), intstr.FromInt32(65536),
			intstr.FromString(""), intstr.FromString("x_y"), intstr.FromString("abcdefghijklmnop"), intstr.FromString("1234"),
		} {
			g.emitValue(path, loc, reflect.ValueOf(p))
		}
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		g.walkPointer(v, path, loc, synthetic)
	case reflect.Struct:
		g.walkStruct(v, path, loc, synthetic)
	case reflect.Slice:
		g.walkSlice(v, path, loc, synthetic)
	case reflect.Map:
		g.walkMap(v, path, loc)
	case reflect.String:
		for _, s := range stringValues(v.String()) {
			g.emitValue(path, loc, reflect.ValueOf(s).Convert(t))
		}
	case reflect.Int32, reflect.Int64, reflect.Int:
		for _, n := range intValues(t) {
			g.emitValue(path, loc, reflect.ValueOf(n).Convert(t))
		}
	case reflect.Bool:
		g.emitValue(path, loc, reflect.ValueOf(!v.Bool()))
	}
}

// stringValues are the mutations of a string whose value is s: empty,
// padded, not a DNS name, too long, a bad enum value, paths that escape.
func stringValues(s string) []string {
	return []string{
		"", " " + s, s + " ", "x_Y", "-x", "bogus",
		strings.Repeat("a", 64), strings.Repeat("a", 254),
		"../x", "/abs", "a/b/c",
	}
}

// intValues are the mutations of an integer of type t.
func intValues(t reflect.Type) []int64 {
	top := int64(math.MaxInt32)
	if t.Kind() != reflect.Int32 {
		top = math.MaxInt64
	}
	return []int64{-1, 0, 1, 65536, top}
}

// walkPointer unsets a set pointer, or sets an unset one to its zero
// value, then walks what it points to.
func (g *generator) walkPointer(v reflect.Value, path string, loc locator, synthetic int) {
	t := v.Type()
	elem := t.Elem()
	if !v.IsNil() {
		g.emit(path, "nil", loc, func(t reflect.Value) { t.SetZero() })
		g.walk(v.Elem(), path, deref(loc), synthetic)
		return
	}
	if synthetic >= maxSynthetic {
		return
	}
	if elem.Kind() == reflect.Struct {
		g.emit(path, "{}", loc, func(t reflect.Value) { t.Set(reflect.New(elem)) })
	}
	g.walk(reflect.New(elem).Elem(), path, deref(loc), synthetic+1)
}

// deref locates what the pointer at loc points to, allocating it.
func deref(loc locator) locator {
	return func(root reflect.Value) reflect.Value {
		p := loc(root)
		if p.IsNil() {
			p.Set(reflect.New(p.Type().Elem()))
		}
		return p.Elem()
	}
}

// walkStruct walks each field that has a JSON name.
func (g *generator) walkStruct(v reflect.Value, path string, loc locator, synthetic int) {
	t := v.Type()
	oneOf := slices.Contains(oneOfTypes, t)
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		child := path
		if name != "" { // an inlined struct adds no path element
			child = strings.TrimPrefix(path+"."+name, ".")
		}
		g.walk(v.Field(i), child, fieldOf(loc, i, oneOf), synthetic)
	}
}

// fieldOf locates field i of the struct at loc. In a one-of struct,
// reaching an unset field clears the others.
func fieldOf(loc locator, i int, oneOf bool) locator {
	return func(root reflect.Value) reflect.Value {
		s := loc(root)
		f := s.Field(i)
		if oneOf && f.IsZero() {
			for j := range s.NumField() {
				if j != i && s.Type().Field(j).IsExported() {
					s.Field(j).SetZero()
				}
			}
		}
		return f
	}
}

// walkSlice empties, extends, duplicates and floods a list, then walks
// its first and last items, or a new item when it is empty.
func (g *generator) walkSlice(v reflect.Value, path string, loc locator, synthetic int) {
	t := v.Type()
	zero := reflect.Zero(t.Elem())
	if v.Len() > 0 {
		g.emit(path, "[]", loc, func(t reflect.Value) { t.SetZero() })
		g.emit(path, "duplicated first item", loc, func(t reflect.Value) { t.Set(reflect.Append(t, t.Index(0))) })
	}
	g.emit(path, "extra empty item", loc, func(t reflect.Value) { t.Set(reflect.Append(t, zero)) })
	g.emit(path, fmt.Sprintf("%d items", many), loc, func(t reflect.Value) { t.Set(flood(t)) })

	indexes := []int{0, v.Len() - 1}
	if v.Len() == 0 {
		if synthetic >= maxSynthetic {
			return
		}
		g.walk(zero, path+"[0]", indexOf(loc, 0), synthetic+1)
		return
	}
	for _, i := range slices.Compact(indexes) {
		g.walk(v.Index(i), fmt.Sprintf("%s[%d]", path, i), indexOf(loc, i), synthetic)
	}
}

// flood returns list grown to many items: distinct strings for a list of
// strings, else copies of its first item (or of the zero item).
func flood(list reflect.Value) reflect.Value {
	out := reflect.MakeSlice(list.Type(), 0, many)
	for i := range many {
		item := reflect.Zero(list.Type().Elem())
		switch {
		case item.Kind() == reflect.String:
			item = reflect.ValueOf(fmt.Sprintf("a%d", i)).Convert(item.Type())
		case list.Len() > 0:
			item = list.Index(0)
		}
		out = reflect.Append(out, item)
	}
	return out
}

// indexOf locates item i of the list at loc, growing the list to hold it.
func indexOf(loc locator, i int) locator {
	return func(root reflect.Value) reflect.Value {
		s := loc(root)
		for s.Len() <= i {
			s.Set(reflect.Append(s, reflect.Zero(s.Type().Elem())))
		}
		return s.Index(i)
	}
}

// walkMap adds bad keys, then mutates each value: the keys and values of
// labels, annotations, node selectors and resource lists.
func (g *generator) walkMap(v reflect.Value, path string, loc locator) {
	t := v.Type()
	keys := []string{"", " a", "a b", "-a", "a/b/c", "UPPER", strings.Repeat("k", 64), "example.com/" + strings.Repeat("k", 64)}
	if t.Key() == reflect.TypeFor[corev1.ResourceName]() {
		keys = append(keys, "cpu", "memory", "hugepages-2Mi", "ephemeral-storage", "bogus", "example.com/gpu")
	}
	var values []reflect.Value
	var ok reflect.Value // a valid value, for the new keys
	switch t.Elem().Kind() {
	case reflect.String:
		for _, s := range []string{"", " x", "x_y", strings.Repeat("v", 64), strings.Repeat("v", 300<<10)} {
			values = append(values, reflect.ValueOf(s).Convert(t.Elem()))
		}
		ok = reflect.ValueOf("v").Convert(t.Elem())
	default: // resource.Quantity
		for _, q := range []string{"-1", "0", "1m", "100Mi", "1Ei"} {
			values = append(values, reflect.ValueOf(resource.MustParse(q)))
		}
		ok = reflect.ValueOf(resource.MustParse("1"))
	}
	for _, k := range keys {
		key := reflect.ValueOf(k).Convert(t.Key())
		g.emit(path, fmt.Sprintf("+key %q", k), loc, func(m reflect.Value) { setKey(m, key, ok) })
	}
	existing := v.MapKeys()
	slices.SortFunc(existing, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
	for _, key := range existing {
		for _, val := range values {
			g.emit(fmt.Sprintf("%s[%s]", path, key), fmt.Sprintf("%.40q", fmt.Sprint(val.Interface())), loc, func(m reflect.Value) { setKey(m, key, val) })
		}
	}
}

// setKey sets key to val in the map m, which it copies first so that the
// base pod's map is never changed.
func setKey(m, key, val reflect.Value) {
	out := reflect.MakeMap(m.Type())
	for _, k := range m.MapKeys() {
		out.SetMapIndex(k, m.MapIndex(k))
	}
	out.SetMapIndex(key, val)
	m.Set(out)
}
