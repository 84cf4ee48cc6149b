package output

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/kubeboot/kubeboot/internal/health"
)

// redrawEvery paces the live block: 10 Hz is smooth for a clock with
// tenths of seconds, and cheap.
const redrawEvery = 100 * time.Millisecond

// ProgressOptions tune a Progress.
type ProgressOptions struct {
	// Terminal says that the writer is a terminal, which gets a live block
	// redrawn in place; otherwise Progress prints one line per change.
	Terminal bool
	// Width is the terminal's width in columns; 0 means 80. Live lines are
	// cut to fit, since a wrapped line would break the redraw.
	Width int
	// Prefix starts every plain line, such as "[wait] ".
	Prefix string
}

// Progress shows Wait's progress to people. Pass its Update method as
// health.WaitOptions.OnChange and call Stop when Wait returns. Nothing else may
// write to the same writer in between, or the live block is garbled.
type Progress struct {
	out   io.Writer
	opts  ProgressOptions
	now   func() time.Time
	start time.Time

	mu    sync.Mutex
	rows  []*row
	drawn int // lines of the live block on screen

	stopOnce sync.Once
	stop     chan struct{} // closed by Stop
	done     chan struct{} // closed when the last redraw is done
}

// row is the display state of one component.
type row struct {
	last  health.Change
	since time.Duration // when the current state began, from the start
}

// NewProgress starts rendering to out; on a terminal it redraws the live
// block until Stop.
func NewProgress(out io.Writer, opts ProgressOptions) *Progress {
	return newProgress(out, opts, time.Now)
}

// newProgress is NewProgress with a clock, for tests.
func newProgress(out io.Writer, opts ProgressOptions, now func() time.Time) *Progress {
	if opts.Width <= 0 {
		opts.Width = 80
	}
	p := &Progress{out: out, opts: opts, now: now, stop: make(chan struct{}), done: make(chan struct{})}
	p.start = p.now()
	if !opts.Terminal {
		close(p.done)
		return p
	}
	go p.loop()
	return p
}

// Update records a change; without a terminal it prints a line when the
// state or its reason changed, leaving out changes of the message alone.
func (p *Progress) Update(c health.Change) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var r *row
	for _, candidate := range p.rows {
		if candidate.last.Component == c.Component {
			r = candidate
		}
	}
	if r == nil {
		r = &row{}
		p.rows = append(p.rows, r)
	}
	printLine := !p.opts.Terminal && (c.State != r.last.State || c.Reason != r.last.Reason)
	if c.State != r.last.State {
		r.since = c.Elapsed
	}
	r.last = c
	if printLine {
		_, _ = fmt.Fprintf(p.out, "%s%s\n", p.opts.Prefix, c)
	}
}

// Stop draws the final state of the live block and stops redrawing. It
// may be called more than once.
func (p *Progress) Stop() {
	p.stopOnce.Do(func() { close(p.stop) })
	<-p.done
}

func (p *Progress) loop() {
	defer close(p.done)
	ticker := time.NewTicker(redrawEvery)
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C:
			p.redraw()
		case <-p.stop:
			p.redraw()
			return
		}
	}
}

// redraw moves the cursor up over the block drawn last and rewrites every
// line, clearing what remains of the old one.
func (p *Progress) redraw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	if p.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", p.drawn)
	}
	now := p.now().Sub(p.start)
	for _, r := range p.rows {
		b.WriteString("\r\x1b[2K" + fit(r.line(now, p.nameWidth()), p.opts.Width-1) + "\n")
	}
	p.drawn = len(p.rows)
	_, _ = io.WriteString(p.out, b.String())
}

// nameWidth aligns the states in a column.
func (p *Progress) nameWidth() int {
	width := 0
	for _, r := range p.rows {
		width = max(width, len(r.last.Component))
	}
	return width
}

// line renders a row as a table line: name, time, state, at time now
// since the start. A healthy row's time stops when it became healthy.
func (r *row) line(now time.Duration, nameWidth int) string {
	prefix := fmt.Sprintf("%-*s %7s  ", nameWidth, r.last.Component, round(now))
	switch r.last.State {
	case health.StateHealthy:
		return fmt.Sprintf("%-*s %7s  healthy", nameWidth, r.last.Component, round(r.last.Elapsed))
	case health.StateUnhealthy:
		return prefix + fmt.Sprintf("unhealthy since %s: %s", round(r.since), strings.ReplaceAll(r.last.Error, "\n", "; "))
	}
	return prefix + "waiting"
}

// fit cuts s to width runes, marking the cut with an ellipsis.
func fit(s string, width int) string {
	if width < 1 || utf8.RuneCountInString(s) <= width {
		return s
	}
	runes := []rune(s)
	return string(runes[:width-1]) + "…"
}

// round shortens a duration as the wait's messages do: 3.2s, 1m4.5s.
func round(d time.Duration) string {
	return d.Round(100 * time.Millisecond).String()
}
