package main

import (
	"strings"
	"testing"
	"time"
)

// TestCommandTargets: the targets table has a row for each converged
// command the benchmark issue sets a limit on, init's and diff's, each
// met or missed by its own median.
func TestCommandTargets(t *testing.T) {
	timed := func(name string, ms ...int) *job {
		j := &job{name: name}
		for _, m := range ms {
			j.samples = append(j.samples, sample{wall: time.Duration(m) * time.Millisecond, rss: 40 << 20})
		}
		return j
	}
	ref := timed("kubeadm rsa", 1000)
	r := &report{
		commands: commandResults{
			render:    &group{jobs: []*job{ref, timed("kubeboot rsa", 500), timed("kubeboot ecdsa", 40)}, ref: ref},
			converged: &group{jobs: []*job{timed("converged init", 45, 48, 70), timed("converged diff", 52, 55, 40)}},
			unchanged: 50,
		},
		wait: waitResults{p50: []float64{40}},
	}
	rows := map[string]target{}
	for _, tg := range r.commandTargets() {
		rows[tg.what] = tg
	}
	for what, want := range map[string]struct {
		measured string
		met      bool
	}{
		"converged re-run of `kubeboot init`":    {"48 ms median, 0 of 50 files written in each of 3 runs", true},
		"`kubeboot diff` of that converged node": {"52 ms median, no difference in each of 3 runs", false},
	} {
		got, ok := rows[what]
		if !ok {
			t.Errorf("no target row %q", what)
			continue
		}
		if got.measured != want.measured || got.met != want.met || !strings.HasPrefix(got.limit, "≤ 50 ms") {
			t.Errorf("row %q: %+v; want measured %q, met %v, limit ≤ 50 ms", what, got, want.measured, want.met)
		}
	}
}
