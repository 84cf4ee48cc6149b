//go:build e2e

package e2e

import (
	"errors"
	"io"
	"os"
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

// failingWriter fails every write, as stdout does on a full disk.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// TestDigestDrainsWhenOutputFails: when the suite's own output fails, the
// digest still reads the tests' output to its end, so a process writing it
// neither blocks nor dies of SIGPIPE, and the failure is kept to report.
func TestDigestDrainsWhenOutputFails(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &drainingWriter{w: failingWriter{}}
	done := make(chan struct{})
	go func() {
		var d failureDigest
		d.read(io.TeeReader(r, out))
		_ = r.Close()
		close(done)
	}()
	// Far more than a pipe's buffer: the writes block unless the digest
	// goes on reading.
	line := strings.Repeat("x", 1023) + "\n"
	for range 1024 {
		if _, err := io.WriteString(w, line); err != nil {
			t.Fatalf("write to the tests' output: %v", err)
		}
	}
	_ = w.Close()
	<-done
	if out.err == nil || !strings.Contains(out.err.Error(), "no space left") {
		t.Errorf("the output's failure is not kept: %v", out.err)
	}
}
