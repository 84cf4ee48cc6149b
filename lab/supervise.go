package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Supervise runs binary with args and starts it again whenever it exits,
// as systemd restarts a node's containerd and kubelet: after restartDelay,
// doubled after each exit within a minute of its start, up to 30 s. It
// returns when ctx ends, after stopping the process with SIGTERM (SIGKILL
// 30 s later). The process shares the supervisor's stdout, stderr and
// process group, so a daemon's log holds both and stopping the daemon's
// group stops both; log receives one line per exit.
// extra are files to pass on as fds 3 and on, as Daemon.ExtraFiles.
func Supervise(ctx context.Context, log io.Writer, restartDelay time.Duration, extra []*os.File, binary string, args ...string) error {
	delay := restartDelay
	for {
		cmd := exec.Command(binary, args...)
		cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = os.Stdout, os.Stderr, extra
		started := time.Now()
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("supervise %s: %w", binary, err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-exited:
				_, _ = fmt.Fprintf(log, "supervisor: stopped %s (%v)\n", binary, exitStatus(err))
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				_, _ = fmt.Fprintf(log, "supervisor: killed %s after 30 s (%v)\n", binary, exitStatus(<-exited))
			}
			return nil
		case err := <-exited:
			if time.Since(started) > time.Minute {
				delay = restartDelay
			}
			_, _ = fmt.Fprintf(log, "supervisor: %s exited (%v); restarting it in %s\n", binary, exitStatus(err), delay)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, 30*time.Second)
	}
}

func exitStatus(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.String()
	}
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}
