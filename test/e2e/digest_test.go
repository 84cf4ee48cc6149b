//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// A failed lab test logs its machines' journals after its error, so the
// error sits far above the end of a long output. The digest repeats, at
// the very end, the last messages each failed test logged.

// digestMessages is how many of a failed test's last messages the digest
// repeats, and digestWidth how much of each.
const (
	digestMessages = 6
	digestWidth    = 400
)

var (
	// testLine names the test whose output follows, in go test -v.
	testLine = regexp.MustCompile(`^=== (?:RUN|CONT|NAME)\s+(\S+)`)
	// failLine ends a failed test, in go test -v.
	failLine = regexp.MustCompile(`^\s*--- FAIL: (\S+)`)
	// messageLine is a test's t.Log, t.Error or t.Fatal line.
	messageLine = regexp.MustCompile(`^\s+(\w+_test\.go:\d+: .*)`)
)

// failureDigest reads go test -v output and remembers, per top-level
// test, its messages other than timings and journals.
type failureDigest struct {
	messages map[string][]string
	failed   []string
}

// read consumes the output until r ends.
func (d *failureDigest) read(r io.Reader) {
	d.messages = map[string][]string{}
	current := ""
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for scanner.Scan() {
		line := scanner.Text()
		if m := testLine.FindStringSubmatch(line); m != nil {
			current, _, _ = strings.Cut(m[1], "/")
			continue
		}
		if m := failLine.FindStringSubmatch(line); m != nil {
			if !strings.Contains(m[1], "/") {
				d.failed = append(d.failed, m[1])
			}
			continue
		}
		m := messageLine.FindStringSubmatch(line)
		if m == nil || current == "" || strings.Contains(m[1], "TIMING:") || strings.Contains(m[1], ": the journal of ") {
			continue
		}
		msg := m[1]
		if len(msg) > digestWidth {
			msg = msg[:digestWidth] + "…"
		}
		d.messages[current] = append(d.messages[current], msg)
		if kept := d.messages[current]; len(kept) > digestMessages {
			d.messages[current] = kept[1:]
		}
	}
	_, _ = io.Copy(io.Discard, r)
}

// write prints the digest of the failed tests; nothing when none failed.
func (d *failureDigest) write(w io.Writer) {
	if len(d.failed) == 0 {
		return
	}
	_, _ = fmt.Fprintf(w, "e2e: %d failed; the last messages of each (timings and journals left out):\n", len(d.failed))
	for _, name := range d.failed {
		_, _ = fmt.Fprintf(w, "  %s:\n", name)
		for _, msg := range d.messages[name] {
			_, _ = fmt.Fprintf(w, "    %s\n", msg)
		}
	}
}
