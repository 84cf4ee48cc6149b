package lab

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	// defaultPath is the PATH a container gets when its env has none, after
	// the bin dir; it is the usual PATH of a container image.
	defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// killTimeout bounds the wait for a process after SIGKILL.
	killTimeout = 10 * time.Second
	// pollInterval is how often a process the runtime did not start (one it
	// reattached to after a restart) is checked for its exit.
	pollInterval = 100 * time.Millisecond
	// exitUnknown is reported for a process that exited while no runtime
	// watched it: only its parent could learn the real exit status.
	exitUnknown = 255
)

// process is the live side of a started container.
type process struct {
	// child is true when this runtime started the process and can wait
	// for it; false when it reattached after a restart and can only poll.
	child bool
	// exited is set, under Runtime.mu, as soon as the process has exited
	// and before its pid can be freed, so no signal reaches a reused pid.
	exited  bool
	done    chan struct{} // closed once the exit is recorded
	logs    *logFile
	outputs []*os.File // read ends of the stdout and stderr FIFOs
}

// closeOutput stops copying output, for a removed container whose FIFOs may
// still be held open by a process that escaped its process group.
func (p *process) closeOutput() {
	closeFiles(p.outputs...)
}

// closeFiles closes files whose close errors tell nothing: FIFO ends, and
// files on an error path.
func closeFiles(files ...*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// startProcess starts c's process in its own process group, with r.mu held,
// and records it as running.
func (r *Runtime) startProcess(c *container) error {
	dir := r.containerDir(c.ID)
	logs, err := openLogFile(c.LogPath, r.logf)
	if err != nil {
		return err
	}
	outR, outW, err := openOutput(filepath.Join(dir, "stdout"))
	if err != nil {
		logs.close()
		return err
	}
	errR, errW, err := openOutput(filepath.Join(dir, "stderr"))
	if err != nil {
		logs.close()
		closeFiles(outR, outW)
		return err
	}
	cmd := &exec.Cmd{
		Path:        c.Path,
		Args:        c.Argv,
		Env:         r.containerEnv(c.Config),
		Dir:         workingDir(c.Config),
		Stdout:      outW,
		Stderr:      errW,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Credential: credential(c.Config)},
	}
	err = cmd.Start()
	closeFiles(outW, errW) // the process holds its own copies now
	if err != nil {
		logs.close()
		closeFiles(outR, errR)
		return err
	}
	// This should not fail: the process is not reaped before reap runs. If
	// it does, a restarted runtime will take the process for gone.
	info, err := readProc(cmd.Process.Pid)
	if err != nil {
		r.logf("container %.13s: %v", c.ID, err)
	}
	c.State = runtimeapi.ContainerState_CONTAINER_RUNNING
	c.PID, c.StartTicks, c.StartedAt = cmd.Process.Pid, info.startTicks, time.Now().UnixNano()
	c.proc = &process{child: true, done: make(chan struct{}), logs: logs, outputs: []*os.File{outR, errR}}
	copied := copyOutput(outR, errR, logs)
	go r.reap(c, cmd, copied)
	if err := r.saveContainer(c); err != nil {
		// The process runs either way; failing the request would make the
		// kubelet start a second copy.
		r.logf("container %.13s: %v", c.ID, err)
	}
	return nil
}

// containerEnv is the container's literal environment plus a PATH that
// finds the bin dir first, since a process does not inherit the runtime's
// environment.
func (r *Runtime) containerEnv(cfg *runtimeapi.ContainerConfig) []string {
	var env []string
	hasPath := false
	for _, kv := range cfg.GetEnvs() {
		env = append(env, kv.GetKey()+"="+string(kv.GetValue()))
		hasPath = hasPath || kv.GetKey() == "PATH"
	}
	if !hasPath {
		env = append(env, "PATH="+r.binDir+":"+defaultPath)
	}
	return env
}

// credential is the user and groups of runAsUser/runAsGroup. Without
// runAsGroup the group is the user's primary group on the host, or 0 when
// the host does not know the user, as container runtimes do.
func credential(cfg *runtimeapi.ContainerConfig) *syscall.Credential {
	sc := cfg.GetLinux().GetSecurityContext()
	if sc.GetRunAsUser() == nil {
		return nil
	}
	uid := sc.GetRunAsUser().GetValue()
	var gid int64
	if sc.GetRunAsGroup() != nil {
		gid = sc.GetRunAsGroup().GetValue()
	} else if u, err := user.LookupId(strconv.FormatInt(uid, 10)); err == nil {
		gid, _ = strconv.ParseInt(u.Gid, 10, 64)
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	for _, g := range sc.GetSupplementalGroups() {
		cred.Groups = append(cred.Groups, uint32(g))
	}
	return cred
}

// reap waits for a process this runtime started and records its exit.
func (r *Runtime) reap(c *container, cmd *exec.Cmd, copied <-chan struct{}) {
	pid := cmd.Process.Pid
	// Wait for the exit without reaping: the pid, and with it the process
	// group ID, stays reserved while we kill what is left of the group, as a
	// container runtime does when a container's init process exits.
	var info unix.Siginfo
	for unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
	}
	finishedAt := time.Now().UnixNano()
	r.mu.Lock()
	c.proc.exited = true
	r.mu.Unlock()
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	if err := cmd.Wait(); cmd.ProcessState == nil {
		// Only possible if something else reaped the child, e.g. a host
		// program that ignores SIGCHLD.
		r.finish(c, exitUnknown, "Unknown", fmt.Sprintf("wait for pid %d: %v", pid, err), finishedAt, copied)
		return
	}
	code := exitCode(cmd.ProcessState)
	reason := "Error"
	if code == 0 {
		reason = "Completed"
	}
	r.finish(c, code, reason, "", finishedAt, copied)
}

// watch polls a process that a previous runtime started until it exits,
// and records an unknown exit code: only its parent could learn it.
func (r *Runtime) watch(c *container, copied <-chan struct{}) {
	for alive(c.PID, c.StartTicks) {
		time.Sleep(pollInterval)
	}
	finishedAt := time.Now().UnixNano()
	r.mu.Lock()
	c.proc.exited = true
	r.mu.Unlock()
	// The group ID is still ours if the pid is free (no process can take a
	// pid that is in use as a group ID) or still held by the zombie leader.
	if info, err := readProc(c.PID); err != nil || info.startTicks == c.StartTicks {
		_ = syscall.Kill(-c.PID, syscall.SIGKILL)
	}
	r.finish(c, exitUnknown, "Unknown", "the process exited while no runtime was its parent; its exit code is unknown", finishedAt, copied)
}

// finish records a process's exit.
func (r *Runtime) finish(c *container, code int32, reason, message string, finishedAt int64, copied <-chan struct{}) {
	// Let the last lines reach the log file before the kubelet sees the
	// exit: it reads the log for the termination message.
	select {
	case <-copied:
	case <-time.After(2 * time.Second):
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c.State = runtimeapi.ContainerState_CONTAINER_EXITED
	c.ExitCode, c.Reason, c.Message, c.FinishedAt = code, reason, message, finishedAt
	if err := r.saveContainer(c); err != nil {
		r.logf("container %.13s: %v", c.ID, err)
	}
	close(c.proc.done)
	r.logf("container %.13s: pid %d exited with code %d (%s)", c.ID, c.PID, code, c.Reason)
}

// exitCode is a process's exit code, 128+n when signal n killed it, as
// shells and container runtimes report it.
func exitCode(ps *os.ProcessState) int32 {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int32(ws.Signal())
	}
	return int32(ps.ExitCode())
}

// signal sends sig to c's main process, or with group to its whole process
// group, unless it has exited. Holding r.mu while checking and sending keeps
// the reaper from freeing the pid in between (see reap); for a process
// another runtime started, its start time proves the pid is still it.
func (r *Runtime) signal(c *container, sig syscall.Signal, group bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := c.proc
	if p == nil || p.exited || (!p.child && !alive(c.PID, c.StartTicks)) {
		return
	}
	pid := c.PID
	if group {
		pid = -pid
	}
	_ = syscall.Kill(pid, sig)
}

// stopContainer sends the stop signal to a running container's process and
// kills its process group after timeout (at once for a zero timeout, or
// when ctx is done), then waits for the exit to be recorded.
func (r *Runtime) stopContainer(ctx context.Context, c *container, timeout time.Duration) error {
	r.mu.Lock()
	p, sig := c.proc, stopSignal(c.Config)
	running := c.State == runtimeapi.ContainerState_CONTAINER_RUNNING && p != nil
	r.mu.Unlock()
	if !running {
		return nil
	}
	if timeout > 0 {
		r.logf("container %.13s: stopping with %s, killing after %s", c.ID, unix.SignalName(sig), timeout)
		r.signal(c, sig, false)
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-p.done:
			return nil
		case <-t.C:
		case <-ctx.Done():
		}
	}
	r.logf("container %.13s: killing its process group", c.ID)
	r.signal(c, syscall.SIGKILL, true)
	select {
	case <-p.done:
		return nil
	case <-time.After(killTimeout):
		return fmt.Errorf("stop container %q: pid %d still runs %s after SIGKILL", c.ID, c.PID, killTimeout)
	}
}

// procInfo is what the runtime reads from /proc/<pid>/stat.
type procInfo struct {
	state      byte   // R, S, D, Z, ...
	cpuTicks   uint64 // user + system time
	startTicks uint64 // start time after boot
	rssPages   uint64
}

// readProc reads /proc/<pid>/stat. Times are in clock ticks (USER_HZ, 100
// on Linux).
func readProc(pid int) (procInfo, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procInfo{}, fmt.Errorf("read process %d: %w", pid, err)
	}
	// The command name in parentheses may contain spaces and parentheses;
	// the fields after the last ')' start with field 3, the state.
	i := bytes.LastIndexByte(data, ')')
	f := strings.Fields(string(data[i+1:]))
	if i < 0 || len(f) < 22 {
		return procInfo{}, fmt.Errorf("read process %d: malformed /proc/%d/stat", pid, pid)
	}
	num := func(n int) uint64 { v, _ := strconv.ParseUint(f[n-3], 10, 64); return v }
	return procInfo{state: f[0][0], cpuTicks: num(14) + num(15), startTicks: num(22), rssPages: num(24)}, nil
}

// alive reports whether pid is still the process that started at
// startTicks, and not a zombie that only waits to be reaped.
func alive(pid int, startTicks uint64) bool {
	info, err := readProc(pid)
	return err == nil && info.startTicks == startTicks && info.state != 'Z' && info.state != 'X'
}
