// Package output owns what kubeboot shows: progress as `[phase] message`
// lines for people or one JSON event per line for programs, the final result
// object, and the live per-component display of a wait. It is the only way
// commands and phases print to the terminal.
package output

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
)

// The event levels.
const (
	LevelInfo  = "info"
	LevelWarn  = "warning"
	LevelError = "error"
)

// Event is one progress message.
type Event struct {
	// Phase is the phase that emits it; empty means the current one.
	Phase string
	// Level is LevelInfo, LevelWarn or LevelError.
	Level string
	// Msg is the human-readable message.
	Msg string
	// Fields are extra machine-readable values, added to the JSON event.
	Fields map[string]any
}

// Reporter prints progress: `[phase] message` lines for people, or one JSON
// object per line for programs. It is safe for concurrent use.
type Reporter struct {
	out  io.Writer
	json bool
	// termWidth is the terminal's width when out is one, else 0.
	termWidth int
	now       func() time.Time
	mu        sync.Mutex
	phase     string
}

// NewReporter prints to out, as JSON lines when asJSON is set.
func NewReporter(out io.Writer, asJSON bool) *Reporter {
	return &Reporter{out: out, json: asJSON, now: time.Now}
}

// SetTerminal tells the reporter that out is a terminal this many columns
// wide, so progress can redraw in place.
func (r *Reporter) SetTerminal(width int) { r.termWidth = width }

// Progress returns a live per-component progress display for the current
// phase. Nothing else may print until its Stop.
func (r *Reporter) Progress() *Progress {
	return NewProgress(r.out, ProgressOptions{Terminal: r.termWidth > 0, Width: r.termWidth, Prefix: "[" + r.phase + "] "})
}

// JSON says whether the reporter prints JSON lines.
func (r *Reporter) JSON() bool { return r.json }

// Phase is the name of the phase events belong to now.
func (r *Reporter) Phase() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.phase
}

// SetPhase names the phase that later events belong to.
func (r *Reporter) SetPhase(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.phase = name
}

// Event prints one event.
func (r *Reporter) Event(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Phase == "" {
		e.Phase = r.phase
	}
	if e.Level != LevelInfo {
		// A warning or an error may quote what a user gave in the wrong
		// place: a token's secret in it is not shown.
		e.Msg = bootstraptoken.Redact(e.Msg)
	}
	if r.json {
		obj := map[string]any{}
		maps.Copy(obj, e.Fields)
		obj["time"] = r.now().UTC().Format(time.RFC3339Nano)
		obj["phase"], obj["level"], obj["msg"] = e.Phase, e.Level, e.Msg
		line, _ := json.Marshal(obj) // only plain values: cannot fail
		_, _ = fmt.Fprintf(r.out, "%s\n", line)
		return
	}
	prefix := ""
	if e.Phase != "" {
		prefix = "[" + e.Phase + "] "
	}
	if e.Level == LevelWarn {
		prefix += "WARNING: "
	}
	_, _ = fmt.Fprintf(r.out, "%s%s\n", prefix, e.Msg)
}

// Infof prints an info event of the current phase.
func (r *Reporter) Infof(format string, args ...any) {
	r.Event(Event{Level: LevelInfo, Msg: fmt.Sprintf(format, args...)})
}

// Warnf prints a warning event of the current phase.
func (r *Reporter) Warnf(format string, args ...any) {
	r.Event(Event{Level: LevelWarn, Msg: fmt.Sprintf(format, args...)})
}

// PrintResult prints the final result object of a run as {"result": res}
// (JSON mode only).
func (r *Reporter) PrintResult(res any) {
	if !r.json {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	line, _ := json.Marshal(map[string]any{"result": res})
	_, _ = fmt.Fprintf(r.out, "%s\n", line)
}

// LastLines is the last n lines of s, without its final newline: the end
// of a command's output, for a message.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
