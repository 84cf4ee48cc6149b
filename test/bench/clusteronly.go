package main

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// The clusters of machines' section, which `-only cluster` measures
// alone.
const (
	clusterOnly    = "cluster"
	clusterHeading = "## Clusters of machines: bring-up and join side by side with kubeadm"
	// clusterBefore is the heading the section goes before when the
	// report lacks it.
	clusterBefore = "## Whole-cluster upgrade: upgrade cluster beside kubeadm's procedure"
)

// writeClusterOnly is `-only cluster`: it runs every cluster job
// (-cluster-warmup rounds, then -cluster-runs timed ones) and puts its
// section, and its rows of the targets table, in the report at -out in
// place of those there, the rest of the report left as it is.
func writeClusterOnly(ctx context.Context, o options, work string) error {
	section, r, err := measureAlone(ctx, o, work, clusterJobs, clusterJobs[:warmupJobs], (*report).clusterSection)
	if err != nil {
		return err
	}
	if err := replaceSection(o.out, clusterHeading, clusterBefore, section); err != nil {
		return err
	}
	return replaceTargets(o.out, r.clusterTargets())
}

// replaceTargets puts ts in the targets table of the report at path, each
// in place of the row of the same target.
func replaceTargets(path string, ts []target) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	lines := strings.SplitAfter(string(doc), "\n")
	for _, t := range ts {
		i := indexOfRow(lines, t.what)
		if i < 0 {
			return fmt.Errorf("%s has no row of the target %q: run make bench for a whole report", path, t.what)
		}
		lines[i] = targetRow(t)
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644); err != nil {
		return err
	}
	logf("wrote %d rows of the targets of %s", len(ts), path)
	return nil
}

// indexOfRow is the index of the table row in lines whose first cell is
// what, or -1.
func indexOfRow(lines []string, what string) int {
	for i, l := range lines {
		if strings.HasPrefix(l, "| "+what+" |") {
			return i
		}
	}
	return -1
}

// targetRow is a row of the targets table.
func targetRow(t target) string {
	verdict := "met"
	if !t.met {
		verdict = "**missed**"
	}
	return fmt.Sprintf("| %s | %s | %s | %s |\n", t.what, t.limit, t.measured, verdict)
}
