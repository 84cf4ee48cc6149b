package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/kubeboot/kubeboot/internal/bootstrap"
)

// applyRounds is how many times each usable cluster's run times `upgrade
// apply` with nothing to change, and the exec floor under it.
const applyRounds = 5

// targetApply bounds upgrade apply's own time with nothing to change: the
// converged re-run's bound, as the issue asks of it.
const targetApply = targetConverged

// applyRun is `kubeboot upgrade apply` with nothing to change on cp1 of
// one usable cluster's run, once it is usable: medians of applyRounds.
type applyRun struct {
	// took is `lab exec cp1 -- kubeboot upgrade apply --config` of the
	// node's file; exec is `lab exec cp1 -- kubeboot version`, the exec
	// and a process's start, the floor under it.
	took, exec time.Duration
	// events spans upgrade apply's first event (its manifests found up to
	// date) to its last (the kubelet found unchanged): the cluster's
	// objects compared, two requests each, and the addons' rollout read.
	events time.Duration
}

// own is upgrade apply's own time: took over its exec floor.
func (a applyRun) own() time.Duration { return a.took - a.exec }

// measureApply times upgrade apply with nothing to change on cp1 of the
// lab of the description file, each run alternating with the floor.
func measureApply(ctx context.Context, o options, file string) (applyRun, error) {
	var took, exec, events []float64
	inNode := func(timeout time.Duration, argv ...string) ([]byte, time.Duration, error) {
		start := time.Now()
		out, err := kubebootJSON(ctx, o, timeout, append([]string{"lab", "exec", "--cluster", file, "--bin-dir", o.binDir, firstNode, "--"}, argv...)...)
		return out, time.Since(start), err
	}
	for range applyRounds {
		out, d, err := inNode(2*time.Minute, "kubeboot", "upgrade", "apply", "--config", bootstrap.ConfigPath, "-o", "json")
		if err != nil {
			return applyRun{}, err
		}
		span, err := unchangedApply(out)
		if err != nil {
			return applyRun{}, err
		}
		took, events = append(took, d.Seconds()), append(events, span.Seconds())
		if _, d, err = inNode(time.Minute, "kubeboot", "version"); err != nil {
			return applyRun{}, err
		}
		exec = append(exec, d.Seconds())
	}
	seconds := func(xs []float64) time.Duration { return time.Duration(summarize(xs).median * float64(time.Second)) }
	return applyRun{took: seconds(took), exec: seconds(exec), events: seconds(events)}, nil
}

// unchangedApply reads upgrade apply's -o json output: it fails unless
// the result says the run wrote nothing, and returns the span from its
// first event to its last.
func unchangedApply(out []byte) (time.Duration, error) {
	var first, last time.Time
	written := -1
	for line := range bytes.Lines(bytes.TrimSpace(out)) {
		var ev struct {
			Time   time.Time `json:"time"`
			Result *struct {
				Written []string `json:"written"`
			} `json:"result"`
		}
		if err := json.Unmarshal(line, &ev); err != nil {
			return 0, fmt.Errorf("upgrade apply's output: %w: %s", err, line)
		}
		if ev.Result != nil {
			written = len(ev.Result.Written)
			continue
		}
		if first.IsZero() {
			first = ev.Time
		}
		last = ev.Time
	}
	switch {
	case written < 0:
		return 0, errors.New("upgrade apply printed no result")
	case written > 0:
		return 0, fmt.Errorf("upgrade apply with nothing to change wrote %d files", written)
	case first.IsZero():
		return 0, errors.New("upgrade apply printed no event")
	}
	return last.Sub(first), nil
}
