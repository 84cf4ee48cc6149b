package phases

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/output"
)

// Each file the phase writes is reported once, by the writer: "wrote" in a
// real run, "would write" in a dry run, and nothing on a converged node.
func TestAPIServerConfigReportsEachFileOnce(t *testing.T) {
	tests := []struct {
		name   string
		writer func(root string, r *output.Reporter) files.Writer
		verb   string
	}{
		{"real", func(root string, r *output.Reporter) files.Writer { return &files.AtomicWriter{Root: root, Report: r} }, "wrote "},
		{"dry run", func(root string, r *output.Reporter) files.Writer {
			return &files.DryRunWriter{Root: root, Report: r, Stdout: &bytes.Buffer{}}
		}, "would write "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			s := manifestState(t, root, "v1.36.3")
			var out bytes.Buffer
			s.Report = output.NewReporter(&out, false)
			s.Files = tt.writer(root, s.Report)
			if err := runAPIServerConfigPhase(s); err != nil {
				t.Fatal(err)
			}
			policy := s.Config.AuditPolicyPath()
			var mentions []string
			for _, line := range strings.Split(out.String(), "\n") {
				if strings.Contains(line, policy) {
					mentions = append(mentions, line)
				}
			}
			if len(mentions) != 1 || !strings.Contains(mentions[0], tt.verb+policy) {
				t.Errorf("want one line %q, got %q", tt.verb+policy, mentions)
			}
			if _, real := s.Files.(*files.AtomicWriter); real {
				out.Reset()
				if err := runAPIServerConfigPhase(s); err != nil {
					t.Fatal(err)
				}
				if strings.Contains(out.String(), policy) {
					t.Errorf("a converged run mentions %s:\n%s", policy, out.String())
				}
			}
		})
	}
}
