package phases

import (
	"bytes"
	"context"
	"io/fs"
	"testing"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/workflow"
)

// nodeFile is one write of a run: what a re-run writes again.
type nodeFile struct {
	path string
	data []byte
	mode fs.FileMode
}

// recordingWriter is an AtomicWriter that remembers every file written
// through it, so a benchmark can replay exactly the writes of a real run.
type recordingWriter struct {
	*files.AtomicWriter
	written []nodeFile
}

func (w *recordingWriter) WriteFile(path string, data []byte, mode fs.FileMode) error {
	w.written = append(w.written, nodeFile{path, data, mode})
	return w.AtomicWriter.WriteFile(path, data, mode)
}

// writeNode runs every phase that writes files (all but preflight and the
// live ones) on a fresh node under root, and returns the files it wrote.
func writeNode(tb testing.TB, root string) []nodeFile {
	tb.Helper()
	c := config.New()
	config.SetDefaults(c, config.Host{Name: "node1", Address: "10.0.0.10"})
	if errs := config.Validate(c); len(errs) > 0 {
		tb.Fatal(errs.ToAggregate())
	}
	w := &recordingWriter{AtomicWriter: &files.AtomicWriter{Root: root}}
	if _, err := writers.Run(context.Background(), offlineNode(c, w), nil); err != nil {
		tb.Fatal(err)
	}
	return w.written
}

// writers are the phases that write a node's files, all but preflight and
// the live ones.
var writers = workflow.Runner[*Node]{Phases: []workflow.Phase[*Node]{Certs, Kubeconfig, KubeletConfig, Etcd, ControlPlane, Validate, WriteManifests}}

// offlineNode is a quiet offline run of c writing through w.
func offlineNode(c *config.ClusterConfiguration, w files.Writer) *Node {
	return &Node{Run: &workflow.Run{System: workflow.HostSystem("v0.0.0-test"), Files: w, Report: output.NewReporter(&bytes.Buffer{}, false), Options: workflow.Options{Offline: true}}, Config: c}
}

// BenchmarkConvergedPhases runs the writing phases of init again on a node
// they wrote: the work of a converged re-run but for the process's start,
// which must read, check and compare every file and write none.
func BenchmarkConvergedPhases(b *testing.B) {
	root := b.TempDir()
	writeNode(b, root)
	c := config.New()
	config.SetDefaults(c, config.Host{Name: "node1", Address: "10.0.0.10"})
	b.ReportAllocs()
	var w *files.AtomicWriter
	for b.Loop() {
		w = &files.AtomicWriter{Root: root}
		if _, err := writers.Run(context.Background(), offlineNode(c, w), nil); err != nil {
			b.Fatal(err)
		}
	}
	if written := w.Changes().Written; len(written) > 0 {
		b.Fatalf("a converged node was rewritten: %v", written)
	}
}

// BenchmarkAtomicWriterUnchanged replays the writes of a whole node (PKI,
// kubeconfigs, kubelet config, staged and installed manifests) on a node
// that already holds them: the files.Writer's share of a converged re-run,
// which must compare and leave every file alone.
func BenchmarkAtomicWriterUnchanged(b *testing.B) {
	root := b.TempDir()
	nodeFiles := writeNode(b, root)
	b.ReportAllocs()
	var w *files.AtomicWriter
	for b.Loop() {
		w = &files.AtomicWriter{Root: root}
		for _, f := range nodeFiles {
			if err := w.WriteFile(f.path, f.data, f.mode); err != nil {
				b.Fatal(err)
			}
		}
	}
	if written := w.Changes().Written; len(written) > 0 {
		b.Fatalf("a converged node was rewritten: %v", written)
	}
	b.ReportMetric(float64(len(nodeFiles)), "files/op")
}
