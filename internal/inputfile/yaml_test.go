package inputfile

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// parsedNodes counts the nodes yaml.v3 builds for data, every alias
// expanded, as a decoder into Go values does; ok is false when data does
// not parse or an alias lies inside its own anchor, which decoders refuse.
func parsedNodes(t testing.TB, data []byte) (int, bool) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	total := 0
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return total, true
		}
		if err != nil {
			return 0, false
		}
		n, ok := expanded(&doc, map[*yaml.Node]bool{})
		if !ok {
			return 0, false
		}
		total += n
	}
}

// expanded counts a node and its descendants, through aliases; ok is false
// for a cycle. inside holds the nodes being counted.
func expanded(n *yaml.Node, inside map[*yaml.Node]bool) (int, bool) {
	if inside[n] {
		return 0, false
	}
	inside[n] = true
	defer delete(inside, n)
	if n.Kind == yaml.AliasNode {
		return expanded(n.Alias, inside)
	}
	total := 1
	for _, c := range n.Content {
		m, ok := expanded(c, inside)
		if !ok {
			return 0, false
		}
		total += m
	}
	return total, true
}

// corpus is YAML and JSON that the estimate must not undercount: real
// files and the tricky corners of quoting, comments, anchors and block
// scalars.
func corpus(t testing.TB) map[string]string {
	t.Helper()
	files := map[string]string{
		"flow list":            "x: [1,2,3,[4,5],{a: 1, b}]\n",
		"block":                "a:\n  b:\n  - 1\n  -\n  - c: d\n    e:\n",
		"empty values":         "a:\nb:\n- \n-\n? c\n",
		"flow map nulls":       "{a, b, c, d: }\n",
		"json":                 `{"apiVersion":"v1","kind":"Pod","spec":{"containers":[{"name":"c","args":["a","b:c","[x]"]}]}}`,
		"json-like keys":       `["a":1,"b":2, {"c":3}]`,
		"quoted brackets":      "x: \"[[[\"\ny: [ \"]\" , 'a]', 1, 2, 3]\n",
		"comments":             "# a: [1,2]\nx: [1, # ]\n  2, 3] # tail\n",
		"block scalar":         "x: |\n  a: [1, 2]\n  - b\ny: >-\n  folded\n  text\nz: [1, 2]\n",
		"documents":            "a: 1\n---\nb: [1, 2]\n...\n---\n- 3\n",
		"anchor scalar":        "a: &v 1\nb: *v\nc: [*v, *v, *v]\n",
		"anchor map":           "base: &b\n  x: 1\n  y: [1, 2]\nc1: *b\nc2: *b\nc3:\n  <<: *b\n  z: 3\n",
		"anchor in flow":       "a: &l [1, 2, 3]\nb: [*l, *l]\nc: {k: *l}\n",
		"anchor seq item":      "- &i\n  a: 1\n  b: 2\n- *i\n- *i\n",
		"anchor on next line":  "a: &n\n  [1, 2,\n   3]\nb: *n\n",
		"nested anchors":       "a: &a [1, 2]\nb: &b [*a, *a]\nc: &c [*b, *b]\nd: [*c, *c]\n",
		"tags":                 "a: !!str 1\nb: &t !!map\n  x: 1\nc: *t\n",
		"multi-line plain":     "a: b\n  c [1, 2]\nd: [3]\n",
		"anchor on a key":      "- &k a, b: [1, 2, 3]\n- *k\n- &m a: b\n  c: d\n- *m\n",
		"anchor in a flow map": "{a: &v x, b: [*v, *v], c: &w 'q', d: *w}\n",
		"multi-line quoted":    "a: \"b\n  c, d\"\ne: 'f\n  ''g'' ]'\nh: [1]\n",
	}
	for _, path := range []string{"../staticpod/testdata/kube-apiserver.yaml", "../config/testdata/defaults.yaml", "../../examples/cluster.yaml", "../../examples/machines.yaml"} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(path)] = string(data)
	}
	return files
}

// TestYAMLNodesBoundsTheParsers checks that the estimate is at least what
// the parser builds, and not far above it for real files.
func TestYAMLNodesBoundsTheParsers(t *testing.T) {
	for name, text := range corpus(t) {
		real, ok := parsedNodes(t, []byte(text))
		if !ok {
			t.Errorf("%s: the corpus must parse", name)
			continue
		}
		got := YAMLNodes([]byte(text), 1<<30)
		if got < real {
			t.Errorf("%s: estimate %d, but the parser builds %d nodes", name, got, real)
		}
		if real > 100 && got > 3*real {
			t.Errorf("%s: estimate %d for %d nodes: too far above to keep real files under the limits", name, got, real)
		}
	}
}

// TestYAMLNodesStopsAtTheLimit covers the worst inputs under the size
// limits: each is refused, in one pass, whatever its shape.
func TestYAMLNodesStopsAtTheLimit(t *testing.T) {
	laughs := "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
	for i := 1; i < 10; i++ {
		laughs += strings.ReplaceAll("aI: &aI [*aJ, *aJ, *aJ, *aJ, *aJ, *aJ, *aJ, *aJ, *aJ, *aJ]\n", "I", string(rune('0'+i)))
		laughs = strings.ReplaceAll(laughs, "J", string(rune('0'+i-1)))
	}
	for name, text := range map[string]string{
		"one-byte flow items": "x: [" + strings.Repeat("1,", ConfigLimit/2-10) + "]\n",
		"block items":         "x:\n" + strings.Repeat("- 1\n", ConfigLimit/4-10),
		"flow map":            "{" + strings.Repeat("a: 1, ", ConfigLimit/6) + "}",
		"empty documents":     strings.Repeat("---\n", ConfigLimit/4),
		"billion laughs":      laughs,
		"words":               "x: \"" + strings.Repeat("a ", ConfigLimit/2-10) + "\"\n",
	} {
		if got := YAMLNodes([]byte(text), ConfigNodes); got <= ConfigNodes {
			t.Errorf("%s: estimate %d, want more than %d", name, got, ConfigNodes)
		}
	}
}

// TestYAMLNodesAliasesOfAScalar covers the one case where an estimate
// from the anchor onwards would add up: many aliases of one scalar.
func TestYAMLNodesAliasesOfAScalar(t *testing.T) {
	text := "a: {v: &v x}\nb: [" + strings.Repeat("*v, ", 1000) + "]\n"
	if got := YAMLNodes([]byte(text), ConfigNodes); got > 3000 {
		t.Errorf("estimate %d for about 1000 nodes", got)
	}
}

// TestYAMLNodesLongString covers what stays cheap: one long string, long
// keys, deep block nesting.
func TestYAMLNodesLongString(t *testing.T) {
	for name, text := range map[string]string{
		"long string":  "x: \"" + strings.Repeat("a", ManifestLimit-10) + "\"\n",
		"long keys":    "? " + strings.Repeat("k", ConfigLimit/2) + "\n: 1\n",
		"deep nesting": "a:\n" + strings.Repeat(" ", 100) + "b: 1\n",
	} {
		if got := YAMLNodes([]byte(text), ConfigNodes); got > 10 {
			t.Errorf("%s: estimate %d, want a handful", name, got)
		}
	}
}

func TestCheckYAML(t *testing.T) {
	err := CheckYAML("big.yaml", []byte("["+strings.Repeat("1,", 20)+"]"), 10)
	if !errors.Is(err, ErrTooComplex) {
		t.Fatalf("got %v, want ErrTooComplex", err)
	}
	for _, want := range []string{`"big.yaml"`, "more than 10 values"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if err := CheckYAML("small.yaml", []byte("[1, 2]"), 10); err != nil {
		t.Errorf("small document: %v", err)
	}
}

func TestReadYAML(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(path, []byte("x: ["+strings.Repeat("1,", 100)+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadYAML(path, 1<<10, 50); !errors.Is(err, ErrTooComplex) {
		t.Errorf("got %v, want ErrTooComplex", err)
	}
	if data, err := ReadYAML(path, 1<<10, 500); err != nil || len(data) == 0 {
		t.Errorf("got %d bytes, %v", len(data), err)
	}
	if _, err := ReadYAML(path, 10, 500); !errors.Is(err, ErrTooLarge) {
		t.Errorf("got %v, want ErrTooLarge", err)
	}
}

// FuzzYAMLNodes looks for a document the parser builds more nodes for
// than the estimate says; the corpus seeds it.
func FuzzYAMLNodes(f *testing.F) {
	for _, text := range corpus(f) {
		f.Add(text)
	}
	f.Fuzz(func(t *testing.T, text string) {
		real, ok := parsedNodes(t, []byte(text))
		if !ok || real > 10_000 {
			return
		}
		if got := YAMLNodes([]byte(text), 1<<30); got < real {
			t.Errorf("estimate %d, but the parser builds %d nodes for %q", got, real, text)
		}
	})
}
