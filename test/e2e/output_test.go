//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// event is one line of `-o json` progress.
type event struct {
	Time   time.Time `json:"time"`
	Phase  string    `json:"phase"`
	Level  string    `json:"level"`
	Msg    string    `json:"msg"`
	Health *struct {
		Component string `json:"component"`
		State     string `json:"state"`
	} `json:"health"`
}

// initResult is the final `{"result": ...}` line of `-o json`.
type initResult struct {
	OK        bool     `json:"ok"`
	Error     string   `json:"error"`
	ExitCode  int      `json:"exitCode"`
	DryRun    bool     `json:"dryRun"`
	Phases    []string `json:"phases"`
	Written   []string `json:"written"`
	Unchanged []string `json:"unchanged"`
	Healthy   []string `json:"healthy"`
	// JoinCommand is init's join command, with its token.
	JoinCommand string `json:"joinCommand"`
	// Snapshot is the snapshot `etcd snapshot save` wrote.
	Snapshot *struct {
		Path string `json:"path"`
	} `json:"snapshot"`
}

// parseJSONOutput splits `-o json` stdout into its events and its final
// result; every line must be JSON and the result must come last.
func parseJSONOutput(stdout string) ([]event, *initResult, error) {
	var events []event
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var result *initResult
	for sc.Scan() {
		line := sc.Bytes()
		if result != nil {
			return nil, nil, fmt.Errorf("a line follows the result: %s", line)
		}
		var final struct {
			Result *initResult `json:"result"`
		}
		if err := json.Unmarshal(line, &final); err != nil {
			return nil, nil, fmt.Errorf("a stdout line is not JSON: %w: %s", err, line)
		}
		if final.Result != nil {
			result = final.Result
			continue
		}
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, nil, fmt.Errorf("decode event: %w: %s", err, line)
		}
		events = append(events, e)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	if result == nil {
		return events, nil, fmt.Errorf("no result line in the output")
	}
	return events, result, nil
}

// phaseEnd is the time of the last event of a phase.
func phaseEnd(events []event, phase string) (time.Time, bool) {
	var end time.Time
	for _, e := range events {
		if e.Phase == phase && e.Time.After(end) {
			end = e.Time
		}
	}
	return end, !end.IsZero()
}

// sameSet says whether two string lists hold the same elements.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
