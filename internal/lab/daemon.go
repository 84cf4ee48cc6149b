package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubeboot/kubeboot/internal/files"
)

// Daemon is a background process of the lab on the host, its load
// balancer, with its pid file and log in a directory.
type Daemon struct {
	// Name names the files: <Dir>/<Name>.pid and <Dir>/<Name>.log.
	Name string
	// Dir holds the pid file and the log.
	Dir string
	// ExtraFiles are open files Start passes on, as fds 3, 4, ...
	ExtraFiles []*os.File
}

// PidFile is the daemon's pid file: "<pid> <start time in clock ticks>",
// so that a recycled pid is never mistaken for the daemon.
func (d Daemon) PidFile() string { return filepath.Join(d.Dir, d.Name+".pid") }

// LogFile receives the daemon's stdout and stderr.
func (d Daemon) LogFile() string { return filepath.Join(d.Dir, d.Name+".log") }

// Running returns the daemon's pid when it still runs.
func (d Daemon) Running() (int, bool) {
	data, err := os.ReadFile(d.PidFile())
	if err != nil {
		return 0, false
	}
	fields := strings.Fields(string(data))
	if len(fields) != 2 {
		return 0, false
	}
	pid, err1 := strconv.Atoi(fields[0])
	start, err2 := strconv.ParseUint(fields[1], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return 0, false
	}
	return pid, alive(pid, start)
}

// Start runs binary with args in its own session, in the background,
// appending its output to the log. It refuses to start a second instance.
func (d Daemon) Start(binary string, args ...string) error {
	if pid, ok := d.Running(); ok {
		return fmt.Errorf("start %s: it already runs as pid %d: run `kubeboot lab down --cluster` first", d.Name, pid)
	}
	if err := os.MkdirAll(d.Dir, 0o700); err != nil {
		return fmt.Errorf("start %s: %w", d.Name, err)
	}
	logFile, err := os.OpenFile(d.LogFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("start %s: %w", d.Name, err)
	}
	defer func() { _ = logFile.Close() }()
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = logFile, logFile, d.ExtraFiles
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", d.Name, err)
	}
	start, _, err := readProc(cmd.Process.Pid)
	if err == nil {
		err = writeAtomic(d.PidFile(), fmt.Appendf(nil, "%d %d\n", cmd.Process.Pid, start))
	}
	if err != nil {
		_ = cmd.Process.Kill()
		return fmt.Errorf("start %s: record its pid: %w", d.Name, err)
	}
	return cmd.Process.Release()
}

// Stop sends SIGTERM to the daemon's process group, then SIGKILL after the
// timeout, and removes the pid file.
func (d Daemon) Stop(timeout time.Duration) error {
	pid, running := d.Running()
	if running {
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		stopped := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, false, func(context.Context) (bool, error) {
			_, running = d.Running()
			return !running, nil
		})
		if stopped != nil {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	if err := os.Remove(d.PidFile()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("stop %s: %w", d.Name, err)
	}
	return nil
}

// readProc reads a process's start time after boot, in clock ticks, and its
// state (R, S, Z, ...) from /proc/<pid>/stat.
func readProc(pid int) (startTicks uint64, state byte, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("read process %d: %w", pid, err)
	}
	// The command name in parentheses may contain spaces and parentheses;
	// the fields after the last ')' start with field 3, the state.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("read process %d: malformed /proc/%d/stat", pid, pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("read process %d: malformed /proc/%d/stat", pid, pid)
	}
	startTicks, err = strconv.ParseUint(f[19], 10, 64)
	return startTicks, f[0][0], err
}

// alive reports whether pid is still the process that started at
// startTicks, and not a zombie that only waits to be reaped.
func alive(pid int, startTicks uint64) bool {
	start, state, err := readProc(pid)
	return err == nil && start == startTicks && state != 'Z' && state != 'X'
}

// writeAtomic writes a file of the lab's own, replacing it atomically.
func writeAtomic(path string, data []byte) error {
	return (&files.AtomicWriter{}).WriteFile(path, data, 0o600)
}
