//go:build e2e

package e2e

import (
	"strings"
	"testing"
)

// TestFailureDigest: the digest names each failed top-level test with its
// last messages, its subtests' included, and leaves out timings, journals,
// and the tests that passed.
func TestFailureDigest(t *testing.T) {
	out := `=== RUN   TestA
=== PAUSE TestA
=== RUN   TestB
=== CONT  TestA
    a_test.go:10: TIMING: lab up: 3s
=== NAME  TestB
    b_test.go:5: fine
--- PASS: TestB (1.00s)
=== NAME  TestA
    a_test.go:20: the Service answered "x", want y
    machine_test.go:197: the journal of cp1:
        Nov 29 10:36:49 cp1 kubelet[167]: I1129 something
=== RUN   TestA/sub
    a_test.go:30: sub failed
    lanes_test.go:146: TIMING: in its lane 38.8s
--- FAIL: TestA (290.03s)
    --- FAIL: TestA/sub (0.01s)
FAIL
`
	var d failureDigest
	d.read(strings.NewReader(out))
	var got strings.Builder
	d.write(&got)
	want := `e2e: 1 failed; the last messages of each (timings and journals left out):
  TestA:
    a_test.go:20: the Service answered "x", want y
    a_test.go:30: sub failed
`
	if got.String() != want {
		t.Errorf("digest:\n%s\nwant:\n%s", got.String(), want)
	}
}
