package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long kubeboot has to stop after SIGTERM before it is
// killed.
const stopGrace = time.Minute

// kubebootJSON runs kubeboot outside any network namespace (lab up makes
// its own, and etcd's snapshot section serves on the host's loopback) and
// returns its stdout, which it returns with the error of a failed run too.
func kubebootJSON(ctx context.Context, o options, timeout time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.kubeboot, args...)
	// On a timeout or an interrupted bench, kubeboot gets SIGTERM, as from
	// a user, so that it stops what it started before it exits.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = stopGrace
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("kubeboot %s: %w\n%s%s", strings.Join(args, " "), err, lastLines(string(out), 10), lastLines(stderr.String(), 20))
	}
	return out, nil
}

// leftovers fails if any process still names dir on its command line:
// every process a section starts on the host does (a machine's
// systemd-nspawn, etcd), and all must be gone once the section stopped
// them. It kills those it finds, by pid; they are the bench's own.
func leftovers(dir string) error {
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return err
	}
	var found []string
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(data, []byte(dir+"/")) {
			continue
		}
		pid := filepath.Base(filepath.Dir(p))
		found = append(found, pid+" "+strings.ReplaceAll(string(data), "\x00", " "))
		if n, err := strconv.Atoi(pid); err == nil {
			_ = syscall.Kill(n, syscall.SIGKILL)
		}
	}
	if len(found) > 0 {
		return fmt.Errorf("processes left running after the round (now killed):\n%s", strings.Join(found, "\n"))
	}
	return nil
}

// stopProcesses stops the processes in reverse start order: SIGTERM to
// each one's process group, then SIGKILL if it has not exited within 20s.
func stopProcesses(cmds []*exec.Cmd) {
	for _, cmd := range slices.Backward(cmds) {
		done := make(chan error, 1)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		go func() { done <- cmd.Wait() }()
		var err error
		select {
		case err = <-done:
		case <-time.After(20 * time.Second):
			logf("%s did not stop within 20s of SIGTERM: killing it", cmd.Args[0])
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			err = <-done
		}
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			logf("wait for %s: %v", cmd.Args[0], err)
		}
	}
}
