package output

import (
	"bytes"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/internal/health"
)

// lockedBuffer is a bytes.Buffer safe for the redraw goroutine.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// progressChanges is a typical wait: etcd turns healthy, the API server
// fails in two ways, the scheduler never answers.
var progressChanges = []health.Change{
	{Component: "etcd", Target: "https://127.0.0.1:2379", State: health.StateWaiting},
	{Component: "kube-apiserver", Target: "https://10.0.0.1:6443/livez, /readyz", State: health.StateWaiting},
	{Component: "kube-scheduler", Target: "https://127.0.0.1:10259/livez", State: health.StateWaiting},
	{Component: "kube-apiserver", State: health.StateUnhealthy, Elapsed: 100 * time.Millisecond, Reason: health.ReasonRefused, Error: "connection refused"},
	{Component: "etcd", State: health.StateHealthy, Elapsed: 1200 * time.Millisecond},
	{Component: "kube-apiserver", State: health.StateUnhealthy, Elapsed: 2 * time.Second, Reason: health.ReasonUnhealthy, Error: "HTTP 500: failing checks: etcd, log"},
	{Component: "kube-apiserver", State: health.StateUnhealthy, Elapsed: 2500 * time.Millisecond, Reason: health.ReasonUnhealthy, Error: "HTTP 500: failing checks: etcd"},
}

func TestProgressPlain(t *testing.T) {
	var out bytes.Buffer
	p := NewProgress(&out, ProgressOptions{Prefix: "[wait] "})
	for _, c := range progressChanges {
		p.Update(c)
	}
	p.Stop()
	p.Stop()
	want := `[wait] etcd: waiting for https://127.0.0.1:2379
[wait] kube-apiserver: waiting for https://10.0.0.1:6443/livez, /readyz
[wait] kube-scheduler: waiting for https://127.0.0.1:10259/livez
[wait] kube-apiserver: unhealthy after 100ms: connection refused
[wait] etcd: healthy after 1.2s
[wait] kube-apiserver: unhealthy after 2s: HTTP 500: failing checks: etcd, log
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

var control = regexp.MustCompile(`\x1b\[\d*[AK]|\r`)

func TestProgressTerminal(t *testing.T) {
	var out lockedBuffer
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	p := newProgress(&out, ProgressOptions{Terminal: true, Width: 60}, clock)
	for _, c := range progressChanges {
		p.Update(c)
	}
	mu.Lock()
	now = start.Add(3400 * time.Millisecond)
	mu.Unlock()
	p.redraw()
	p.Stop()

	got := out.String()
	if !strings.Contains(got, "\x1b[3A") {
		t.Errorf("the block is not redrawn in place: %q", got)
	}
	lines := strings.Split(control.ReplaceAllString(got, ""), "\n")
	lines = lines[len(lines)-4:]
	want := []string{
		"etcd              1.2s  healthy",
		"kube-apiserver    3.4s  unhealthy since 100ms: HTTP 500: f…",
		"kube-scheduler    3.4s  waiting",
		"",
	}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("final block (-want +got):\n%s", diff)
	}
	for _, line := range lines {
		if n := len([]rune(line)); n > 59 {
			t.Errorf("line of %d runes is wider than the terminal: %q", n, line)
		}
	}
}

func TestFit(t *testing.T) {
	for _, tt := range []struct {
		s     string
		width int
		want  string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"too long", 5, "too …"},
		{"héllo wörld", 6, "héllo…"},
	} {
		if got := fit(tt.s, tt.width); got != tt.want {
			t.Errorf("fit(%q, %d) = %q, want %q", tt.s, tt.width, got, tt.want)
		}
	}
}
