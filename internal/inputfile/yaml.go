package inputfile

import (
	"bytes"
	"errors"
	"fmt"
)

// The limits on the structure of a YAML or JSON input, in YAMLNodes'
// estimate. Decoding costs memory per node (the parsers' trees, the JSON
// conversion, the typed result), about 1 KiB each for a configuration and
// half that for a manifest, so a file under its size limit made of
// one-byte items would take gigabytes. At these limits kubeboot stays well
// under 256 MB, while a real file is far below them: a generous
// configuration or a static pod is a few hundred to a few thousand nodes.
const (
	// ConfigNodes caps a configuration file (ClusterConfiguration,
	// JoinConfiguration, WorkerConfiguration).
	ConfigNodes = 50_000
	// ManifestNodes caps a static pod manifest.
	ManifestNodes = 100_000
)

// ErrTooComplex is wrapped by the error for a YAML or JSON file with more
// nodes than its limit.
var ErrTooComplex = errors.New("too many YAML nodes")

// ReadYAML is Read for a YAML or JSON file, which must also hold at most
// nodes nodes by YAMLNodes' estimate.
func ReadYAML(path string, limit int64, nodes int) ([]byte, error) {
	data, err := Read(path, limit)
	if err != nil {
		return nil, err
	}
	if err := CheckYAML(path, data, nodes); err != nil {
		return nil, err
	}
	return data, nil
}

// CheckYAML refuses YAML or JSON data, read from name, that holds more
// than limit nodes by YAMLNodes' estimate, before any decoder spends
// memory on it.
func CheckYAML(name string, data []byte, limit int) error {
	if YAMLNodes(data, limit) > limit {
		return fmt.Errorf("read %q: %w: %s", name, ErrTooComplex, TooComplex(limit))
	}
	return nil
}

// TooComplex says why a document over limit nodes is refused, for a caller
// that reports it in its own words.
func TooComplex(limit int) string {
	return fmt.Sprintf("more than %d values (each word, key, list item, bracket, comma and "+
		"alias expansion counts): kubeboot refuses it rather than spend unbounded memory decoding it; "+
		"a real file has a few thousand at most", limit)
}

// YAMLNodes estimates, from above, how many nodes the YAML (or JSON)
// parsers build for data, all documents and alias expansions included,
// without parsing it: in one pass, with memory bounded by the number of
// anchors. It stops once the estimate passes limit and then returns a
// number above limit.
//
// The estimate ignores quoting, comments and block scalars, so that no
// misreading of YAML's many quoting rules can hide structure from it: it
// counts every run of bytes between whitespace and flow indicators ([ ] { }
// ,), plus two for each ":" in the run and for a "-" alone (each may bring
// a null and a collection), three for each "?" (a null key and value, and
// a mapping), plus one for each flow indicator, and one for each document,
// which may be empty (null). A
// parser node always starts such a run or is the null or collection next
// to one, so a document of n nodes counts at least n. Text full of words counts each word: a quoted or block string of
// a million words counts a million.
//
// An alias (*name) counts as the document since its anchor (&name), less
// that anchor's own earlier aliases, which cannot lie inside the node it
// names: so an alias costs at least what it expands to, and a billion
// laughs grows past any limit in a few lines. An anchor followed on its
// line by a scalar (plain, quoted, block, or a key, which it then names)
// names one node, and its alias counts one.
func YAMLNodes(data []byte, limit int) int {
	// The first document is implicit, and its node counts.
	c := counter{limit: limit, count: 1, anchors: map[string]*anchor{}}
	for line := range bytes.Lines(data) {
		c.line(line)
		if c.count > limit {
			break
		}
	}
	return c.count
}

// counter is YAMLNodes' state.
type counter struct {
	limit   int
	count   int
	anchors map[string]*anchor
}

// anchor is what counter knows of an &name.
type anchor struct {
	// start is the count where the anchor was set.
	start int
	// self is what this anchor's own aliases have added since.
	self int
	// scalar says the anchor names a scalar, one node.
	scalar bool
}

// size estimates the nodes of the anchor's node, from above.
func (c *counter) size(a *anchor) int {
	if a.scalar {
		return 1
	}
	return c.count - a.start - a.self
}

// line counts the runs of one line, stopping once past the limit.
func (c *counter) line(line []byte) {
	if isDocumentMarker(line) {
		// A new document, maybe empty (a null node); anchors are scoped
		// to their document.
		c.count++
		clear(c.anchors)
	}
	for run, rest := nextRun(line); run != nil && c.count <= c.limit; run, rest = nextRun(rest) {
		c.run(run, rest)
	}
}

// run counts one run; rest is the line after it.
func (c *counter) run(run, rest []byte) {
	name, tail := anchorName(run)
	switch {
	case name != "" && run[0] == '&':
		c.count += 1 + indicators(tail)
		c.anchors[name] = &anchor{start: c.count, scalar: namesScalar(rest)}
	case name != "" && run[0] == '*':
		n := 1 // an unknown alias: the parsers refuse it
		if a, ok := c.anchors[name]; ok {
			n = max(c.size(a), 1)
			a.self += n
		}
		c.count += n + indicators(tail)
	case string(run) == "-":
		c.count += 2 // an entry, maybe null, and maybe its sequence
	default:
		c.count += 1 + indicators(run)
	}
}

// indicators counts what the ":" and "?" in a run may bring: a ":" a null
// value and a mapping, a "?" a null key and value and a mapping.
func indicators(run []byte) int {
	return 2*bytes.Count(run, []byte(":")) + 3*bytes.Count(run, []byte("?"))
}

// anchorName returns the name of the anchor or alias that run starts with,
// as the parsers scan it (letters, digits, "_" and "-"), and the rest of
// the run; the name is "" when run is neither.
func anchorName(run []byte) (name string, tail []byte) {
	if run[0] != '&' && run[0] != '*' {
		return "", nil
	}
	end := 1
	for end < len(run) && isAnchorChar(run[end]) {
		end++
	}
	return string(run[1:end]), run[end:]
}

// isAnchorChar says whether b may be part of an anchor's name.
func isAnchorChar(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z' || b == '_' || b == '-'
}

// namesScalar says whether what follows an anchor on its line surely
// starts a scalar: a plain, quoted or block scalar, or a key, which the
// anchor then names rather than its mapping. It is not a collection, a
// tag (whose node may be on the next line), an entry or a comment.
func namesScalar(rest []byte) bool {
	run, _ := nextRun(rest)
	if run == nil || string(run) == "-" || string(run) == "?" {
		return false
	}
	return !bytes.ContainsAny(run[:1], "[]{},!&*#%@`:")
}

// nextRun returns the first run of line and what follows it, or nil at
// the end of the line. A run is a flow indicator ([ ] { } ,), one byte,
// or the text between those and whitespace.
func nextRun(line []byte) (run, rest []byte) {
	line = bytes.TrimLeft(line, " \t\r\n")
	if len(line) == 0 {
		return nil, nil
	}
	if isFlowIndicator(line[0]) {
		return line[:1], line[1:]
	}
	end := bytes.IndexFunc(line, func(r rune) bool {
		return r == ' ' || r == '\t' || r == '\r' || r == '\n' || r < 0x80 && isFlowIndicator(byte(r))
	})
	if end < 0 {
		return line, nil
	}
	return line[:end], line[end:]
}

// isFlowIndicator says whether b opens, closes or separates a flow
// collection.
func isFlowIndicator(b byte) bool {
	return b == '[' || b == ']' || b == '{' || b == '}' || b == ','
}

// isDocumentMarker says whether a line starts a new document ("---") or
// ends one ("..."), as the parsers read it wherever it appears.
func isDocumentMarker(line []byte) bool {
	for _, marker := range []string{"---", "..."} {
		if rest, ok := bytes.CutPrefix(line, []byte(marker)); ok && (len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t' || rest[0] == '\r' || rest[0] == '\n') {
			return true
		}
	}
	return false
}
