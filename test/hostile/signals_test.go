package hostile

import (
	"syscall"
	"testing"
	"time"
)

// signalRows are the interruptions of a run: Main handles SIGINT and
// SIGTERM once, for every command.
var signalRows = []row{
	{
		// The supervised daemon ignores SIGTERM, so the supervisor, its
		// context ended by the first signal, waits for it.
		defect: "S1", name: "a second SIGTERM ends a run that does not stop at once",
		setup: func(env) []string {
			return []string{"lab", "supervise", "--", "sh", "-c", `trap "" TERM; exec sleep 5`}
		},
		run: func(e env, args []string) result { return terminatedTwice(e, args, time.Second) },
		// Killed by the second signal (no exit code), at once.
		code: -1, within: 2 * time.Second,
	},
}

func TestSignals(t *testing.T) { runRows(t, signalRows) }

// terminatedTwice starts kubeboot, sends it SIGTERM after delay and again
// half a second later, and returns how it ended; took counts from the
// second signal. A run that ends before the first is a failure.
func terminatedTwice(e env, args []string, delay time.Duration) result {
	e.t.Helper()
	cmd, stdout, stderr := command(e.t.Context(), e.dir, args...)
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for _, wait := range []time.Duration{delay, 500 * time.Millisecond} {
		select {
		case err := <-done:
			res := finish(e.t, cmd, err, stdout, stderr, 0)
			e.t.Fatalf("kubeboot ended before the signals: exit %d, %s", res.code, res.stderr)
		case <-time.After(wait):
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			e.t.Fatal(err)
		}
	}
	start := time.Now()
	return finish(e.t, cmd, <-done, stdout, stderr, time.Since(start))
}
