package hostile

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// signalRows are the interruptions of a run: Main handles SIGINT and
// SIGTERM once, for every command.
var signalRows = []row{
	{
		// reset asks, at a terminal, whether the etcd data may go, and
		// waits for the answer in a read that no context ends: the first
		// signal cannot stop it at once, the second must.
		defect: "S1", name: "a second SIGTERM ends a run that does not stop at once",
		setup: func(e env) []string {
			for _, dir := range []string{"snap", "wal"} {
				path := filepath.Join(e.node, "var/lib/etcd/member", dir, "data")
				if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
					e.t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte("etcd's"), 0o600); err != nil {
					e.t.Fatal(err)
				}
			}
			return []string{"reset", "--root", e.node}
		},
		run: func(e env, args []string) result { return terminatedTwiceAtATerminal(e, args, time.Second) },
		// Killed by the second signal (no exit code), at once.
		code: -1, within: 2 * time.Second, allowed: []string{"/node/run"},
	},
}

func TestSignals(t *testing.T) { runRows(t, signalRows) }

// terminatedTwiceAtATerminal starts kubeboot with a terminal of its own
// as stdin, sends it SIGTERM after delay and again half a second later,
// and returns how it ended; took counts from the second signal. A run
// that ends before the first is a failure.
func terminatedTwiceAtATerminal(e env, args []string, delay time.Duration) result {
	e.t.Helper()
	cmd, stdout, stderr := command(e.t.Context(), e.dir, args...)
	cmd.Stdin = terminal(e.t)
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

// terminal opens a pseudo-terminal and returns its terminal side, on which
// nobody types; both sides close when the test ends.
func terminal(t *testing.T) *os.File {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ptmx.Close() })
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("number of the pseudo-terminal: %v", err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tty.Close() })
	return tty
}
