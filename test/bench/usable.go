package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// The usable cluster's section, which `-only usable-cluster` measures
// alone.
const (
	usableOnly    = "usable-cluster"
	usableHeading = "### A usable cluster"
	// usableBefore is the heading the section goes before when the
	// report lacks it.
	usableBefore = "### Scale: workers joining at once"
	// previousUsable is the section's headline before the nodes' stores
	// were preloaded.
	previousUsable = "56.3 s (median of 3 rounds; make bench of 2026-11-24 at kubeboot 52ed686, on the lab's nodes of then, each of which imported the lab's 700 MB of images into its containerd as it came up)"
)

// writeUsableOnly is `-only usable-cluster`: it runs the usable cluster's
// job alone (-cluster-warmup rounds, then -cluster-runs timed ones) and
// puts its section in the report at -out in place of the section there,
// the rest of the report left as it is.
func writeUsableOnly(ctx context.Context, o options, work string) error {
	jobs := []string{jobUsable}
	section, _, err := measureAlone(ctx, o, work, jobs, jobs, (*report).usableSection)
	if err != nil {
		return err
	}
	return replaceSection(o.out, usableHeading, usableBefore, section)
}

// measureAlone runs the cluster jobs of an -only section (warmup of them
// in its warm-up rounds) and renders the section with write, its first
// paragraph led by the commit and the time it was measured at.
func measureAlone(ctx context.Context, o options, work string, jobs, warmup []string, write func(*report, *strings.Builder)) (string, *report, error) {
	commit, err := output(ctx, "git", "describe", "--tags", "--always", "--dirty")
	if err != nil {
		return "", nil, err
	}
	r := &report{opts: o}
	if r.versions, err = readVersions(ctx, o); err != nil {
		return "", nil, err
	}
	if r.clusters, err = measureClusters(ctx, o, work, jobs, warmup); err != nil {
		return "", nil, err
	}
	var b strings.Builder
	write(r, &b)
	return strings.Replace(b.String(), "\n\n", fmt.Sprintf("\n\nMeasured at kubeboot %s on %s, %d timed rounds after %d warm-up (`go run ./test/bench -only %s`). ",
		strings.TrimSpace(commit), time.Now().UTC().Format("2006-01-02 15:04 MST"), o.clusterRuns, o.clusterWarmup, o.only), 1), r, nil
}
