package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
)

// Polling. The first checks come quickly because a component that is
// already running should be confirmed at once. The interval then grows to
// fastInterval and stays there for fastPeriod: with a fixed interval, a
// component that turns healthy at a random moment is seen on average half
// an interval later (50 ms here; kubeadm's fixed 500 ms gives 250 ms), and
// control-plane components start within seconds to tens of seconds. A
// component still failing after fastPeriod is likely broken, so it is
// polled once a second to spare it and its logs.
//
// One check may take attemptTimeout, etcdctl's default: longer than the
// API server's own 2 s etcd check inside /readyz, so that a slow but
// working component still passes.
const (
	firstInterval  = 20 * time.Millisecond
	backoffFactor  = 1.5
	fastInterval   = 100 * time.Millisecond
	fastPeriod     = time.Minute
	slowInterval   = time.Second
	attemptTimeout = 5 * time.Second
)

// State is where one component stands during a Wait.
type State string

// The states of a component.
const (
	// StateWaiting: no check has finished yet.
	StateWaiting State = "waiting"
	// StateUnhealthy: the last check failed.
	StateUnhealthy State = "unhealthy"
	// StateHealthy: a check passed. The component is not checked again, so
	// a later failure is not noticed: the wait answers "did the control
	// plane come up", and the kubelet's own probes handle later failures.
	StateHealthy State = "healthy"
)

// Change is the new state of one component, passed to WaitOptions.OnChange.
type Change struct {
	// Component is the component's name.
	Component string `json:"component"`
	// Target is what is checked.
	Target string `json:"target"`
	// State is the new state.
	State State `json:"state"`
	// Elapsed is the time from the start of the wait to this change; JSON
	// gives it in seconds.
	Elapsed time.Duration `json:"elapsed"`
	// Reason classifies the last error of an unhealthy component.
	Reason Reason `json:"reason,omitempty"`
	// Error is the last error of an unhealthy component.
	Error string `json:"error,omitempty"`
}

// String is a one-line summary: "kube-apiserver: healthy after 3.2s".
func (c Change) String() string {
	switch c.State {
	case StateWaiting:
		return c.Component + ": waiting for " + c.Target
	case StateUnhealthy:
		return fmt.Sprintf("%s: unhealthy after %s: %s", c.Component, round(c.Elapsed), c.Error)
	}
	return fmt.Sprintf("%s: %s after %s", c.Component, c.State, round(c.Elapsed))
}

// MarshalJSON encodes Elapsed in seconds, which scripts read more easily
// than nanoseconds.
func (c Change) MarshalJSON() ([]byte, error) {
	type fields Change // the same fields without this method
	return json.Marshal(struct {
		fields
		Elapsed float64 `json:"elapsed"`
	}{fields(c), c.Elapsed.Round(time.Millisecond).Seconds()})
}

// WaitOptions tune Wait.
type WaitOptions struct {
	// Timeout bounds the whole wait; 0 means config.DefaultControlPlaneWait.
	// The caller passes cfg.Timeouts.ControlPlane.
	Timeout time.Duration
	// OnChange, when set, is called when a component's state, reason or
	// error changes, one call at a time, and first once per component with
	// StateWaiting.
	OnChange func(Change)
	// ManifestsDir is the kubelet's manifest directory, named in the
	// diagnostics' next commands.
	ManifestsDir string
	// ForeignFiles are files in ManifestsDir that kubeboot did not write;
	// the kubelet runs them too, so the diagnostics list them.
	ForeignFiles []string
}

// component is Wait's view of one probe.
type component struct {
	probe Probe
	last  Change
	err   error
}

// update records a check's outcome and reports whether the state, reason
// or error changed.
func (c *component) update(err error, elapsed time.Duration) bool {
	c.err = err
	next := c.last
	next.State, next.Reason, next.Error = StateHealthy, "", ""
	if err != nil {
		next.State, next.Reason, next.Error = StateUnhealthy, reasonOf(err), err.Error()
	}
	if next.State == c.last.State && next.Reason == c.last.Reason && next.Error == c.last.Error {
		return false
	}
	next.Elapsed = elapsed
	c.last = next
	return true
}

// result is the outcome of one check.
type result struct {
	index int
	err   error
}

// Wait runs every probe concurrently until all are healthy, and returns
// the healthy components in the probes' order. Each probe is polled on its
// own schedule and stops once healthy. When the timeout (or the deadline
// of ctx) passes first, the error is a *NotHealthyError that explains each
// component that is not healthy; when ctx is cancelled, the error wraps
// context.Canceled.
func Wait(ctx context.Context, probes []Probe, opts WaitOptions) ([]string, error) {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = config.DefaultControlPlaneWait
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	var wg sync.WaitGroup
	// No poller outlives Wait: cancel them, then wait for them.
	defer func() { cancel(); wg.Wait() }()

	start := time.Now()
	results := make(chan result)
	components := make([]component, len(probes))
	for i, p := range probes {
		components[i] = component{probe: p, last: Change{Component: p.Component, Target: p.Target, State: StateWaiting}}
		if opts.OnChange != nil {
			opts.OnChange(components[i].last)
		}
		wg.Go(func() { poll(ctx, i, p.Check, results) })
	}
	for left := len(probes); left > 0; {
		select {
		case r := <-results:
			if changed := components[r.index].update(r.err, time.Since(start)); changed && opts.OnChange != nil {
				opts.OnChange(components[r.index].last)
			}
			if r.err == nil {
				left--
			}
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return healthyNames(components), fmt.Errorf("wait for the control plane: %w", ctx.Err())
			}
			return healthyNames(components), notHealthy(components, time.Since(start), opts)
		}
	}
	return healthyNames(components), nil
}

// poll runs check until it passes or ctx is done, sending every outcome.
func poll(ctx context.Context, index int, check func(context.Context) error, results chan<- result) {
	start := time.Now()
	interval := firstInterval
	for {
		attempt, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := check(attempt)
		cancel()
		if ctx.Err() != nil {
			// The check was cut short by the end of the wait: its error
			// says nothing about the component.
			return
		}
		select {
		case results <- result{index: index, err: err}:
		case <-ctx.Done():
			return
		}
		if err == nil {
			return
		}
		select {
		case <-time.After(interval):
		case <-ctx.Done():
			return
		}
		interval = nextInterval(interval, time.Since(start))
	}
}

// nextInterval grows the poll interval by backoffFactor up to fastInterval
// during fastPeriod, and up to slowInterval after it.
func nextInterval(current, elapsed time.Duration) time.Duration {
	limit := fastInterval
	if elapsed >= fastPeriod {
		limit = slowInterval
	}
	return min(time.Duration(float64(current)*backoffFactor), limit)
}

// reasonOf returns the reason of the first ProbeError in err.
func reasonOf(err error) Reason {
	var pe *ProbeError
	if errors.As(err, &pe) {
		return pe.Reason
	}
	return ReasonOther
}

func healthyNames(components []component) []string {
	var names []string
	for _, c := range components {
		if c.last.State == StateHealthy {
			names = append(names, c.probe.Component)
		}
	}
	return names
}

// round shortens a duration for people: 3.2s, 1m4.5s.
func round(d time.Duration) string {
	return d.Round(100 * time.Millisecond).String()
}
