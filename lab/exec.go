package lab

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// maxExecOutput caps each output stream of ExecSync, well inside the
// kubelet's 16 MiB message limit.
const maxExecOutput = 4 << 20

// ExecSync runs a command (an exec probe) on the host, with the container's
// environment, working directory and user, and returns its exit code and
// output.
func (s runtimeService) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	s.mu.Lock()
	c, ok := lookup(s.containers, req.GetContainerId())
	var env []string
	var dir string
	var cred *syscall.Credential
	if ok {
		env, dir, cred = s.containerEnv(c.Config), workingDir(c.Config), credential(c.Config)
	}
	running := ok && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING
	s.mu.Unlock()
	switch {
	case !ok:
		return nil, notFound("container", req.GetContainerId())
	case !running:
		return nil, wrongState("exec in container %q: it is not running", c.ID)
	case len(req.GetCmd()) == 0:
		return nil, invalid("exec in container %q: no command", c.ID)
	}
	path, err := s.resolveCommand(req.GetCmd()[0])
	if err != nil {
		return nil, fmt.Errorf("exec in container %q: %w", c.ID, err)
	}
	if req.GetTimeout() > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.GetTimeout())*time.Second)
		defer cancel()
	}
	var stdout, stderr cappedBuffer
	cmd := exec.CommandContext(ctx, path, req.GetCmd()[1:]...)
	cmd.Args[0] = req.GetCmd()[0]
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = env, dir, &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	// On timeout kill the whole group, and stop waiting for output that
	// a straggler outside the group may still hold open.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return nil, status.Errorf(codes.DeadlineExceeded, "exec in container %q: %q timed out after %ds", c.ID, strings.Join(req.GetCmd(), " "), req.GetTimeout())
	}
	if cmd.ProcessState == nil {
		return nil, fmt.Errorf("exec in container %q: %w", c.ID, err)
	}
	return &runtimeapi.ExecSyncResponse{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), ExitCode: exitCode(cmd.ProcessState)}, nil
}

// cappedBuffer keeps the first maxExecOutput bytes written to it and
// discards the rest without failing the writer.
type cappedBuffer struct{ bytes.Buffer }

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := maxExecOutput - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
