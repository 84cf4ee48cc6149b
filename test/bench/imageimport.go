package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// The image import section, which -only imageImportOnly measures alone.
const (
	imageImportOnly    = "image-import"
	imageImportHeading = "## Image bundle import: kubeboot images import beside ctr images import"
	imageImportBefore  = "## Lab: from init to a healthy control plane"
	// imageImportCount is the benchmark's -count: each is 3 imports.
	imageImportCount = 3
)

// imageImportTools are BenchmarkImport's sub-benchmarks, in the table's
// order: kubeboot, ctr through containerd's transfer service (its
// default), and ctr's client-side import, which kubeboot's is like.
var imageImportTools = []string{"kubeboot", "ctr", "ctr-local"}

// imageImportResults are the section's measurements: per tool, the time
// of an import and the peak RSS of the importing process and of
// containerd, one value per -count run.
type imageImportResults struct {
	commit   string
	measured time.Time
	seconds  map[string][]float64
	childMiB map[string][]float64
	ctrdMiB  map[string][]float64
}

// measureImageImport runs internal/imagebundle's BenchmarkImport: one
// bundle of about 200 MiB imported into a fresh containerd (the bin
// dir's, run on this host as a node's would be) by each tool, each run a
// child process.
func measureImageImport(ctx context.Context, o options) (*imageImportResults, error) {
	logf("image import: go test ./internal/imagebundle -bench BenchmarkImport -benchtime 3x -count %d", imageImportCount)
	commit, err := output(ctx, "git", "describe", "--tags", "--always", "--dirty")
	if err != nil {
		return nil, err
	}
	raw, err := goTest(ctx, o, "image-import.txt", "test", "./internal/imagebundle", "-run", "^$", "-bench", "^BenchmarkImport$",
		"-benchtime", "3x", "-count", fmt.Sprint(imageImportCount))
	if err != nil {
		return nil, err
	}
	r := &imageImportResults{commit: commit, measured: time.Now().UTC(),
		seconds: map[string][]float64{}, childMiB: map[string][]float64{}, ctrdMiB: map[string][]float64{}}
	for _, l := range parseBench(raw) {
		tool, ok := strings.CutPrefix(l.name, "BenchmarkImport/")
		if !ok {
			continue
		}
		r.seconds[tool] = append(r.seconds[tool], l.values["ns/op"]/1e9)
		r.childMiB[tool] = append(r.childMiB[tool], l.values["child-peak-MiB"])
		r.ctrdMiB[tool] = append(r.ctrdMiB[tool], l.values["containerd-peak-MiB"])
	}
	for _, tool := range imageImportTools {
		if len(r.seconds[tool]) == 0 {
			return nil, fmt.Errorf("no BenchmarkImport/%s result in:\n%s", tool, raw)
		}
	}
	return r, nil
}

// writeImageImportOnly measures the section and replaces it in the report.
func writeImageImportOnly(ctx context.Context, o options) error {
	r, err := measureImageImport(ctx, o)
	if err != nil {
		return err
	}
	var b strings.Builder
	r.markdown(&b)
	return replaceSection(o.out, imageImportHeading, imageImportBefore, b.String())
}

// markdown writes the section; a nil r writes nothing.
func (r *imageImportResults) markdown(b *strings.Builder) {
	if r == nil {
		return
	}
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("%s\n\n", imageImportHeading)
	w("Measured at kubeboot %s on %s (`go run ./test/bench -only %s` measures this section alone and replaces it here). ", r.commit, r.measured.Format("2006-01-02 15:04 MST"), imageImportOnly)
	w("`BenchmarkImport` (internal/imagebundle) writes one bundle of about 200 MiB (4 images of 2 uncompressed random layers of 25 MiB each) ")
	w("and imports it into a fresh containerd, the bin dir's, run on this host with a root of its own as a node's runs, once per import: ")
	w("with `kubeboot images import`, which verifies the whole bundle before it imports anything, and with `ctr -n k8s.io images import` of the same file, ")
	w("by default through containerd's transfer service and with `--local`, the client-side import kubeboot's is like. ")
	w("Each tool runs as a child process; the peak RSS is the child's (rusage) and containerd's (VmHWM). ")
	w("%d runs of 3 imports each; min / median / max of the runs.\n\n", imageImportCount)
	w("| tool | time per import | ratio to ctr --local | importer's peak RSS | containerd's peak RSS |\n|---|---|---|---|---|\n")
	ref := summarize(r.seconds["ctr-local"]).median
	names := map[string]string{"kubeboot": "`kubeboot images import`", "ctr": "`ctr images import` (transfer service)", "ctr-local": "`ctr images import --local`"}
	for _, tool := range imageImportTools {
		s, child, ctrd := summarize(r.seconds[tool]), summarize(r.childMiB[tool]), summarize(r.ctrdMiB[tool])
		w("| %s | %s / %s / %s | %s | %.1f MiB | %.1f MiB |\n", names[tool], fmtSeconds(s.min), fmtSeconds(s.median), fmtSeconds(s.max),
			fmtRatio(s.median/ref), child.median, ctrd.median)
	}
	w("\nkubeboot reads and hashes the whole bundle once before it imports anything, and the import reads it again: that pass is what it adds to `--local`'s work.\n\n")
}
