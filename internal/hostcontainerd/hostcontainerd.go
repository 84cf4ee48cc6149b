// Package hostcontainerd runs a containerd of a bin dir on this host
// with a root, a state and a socket of its own, without the CRI or NRI,
// in a mount namespace whose /run is its own: a store that imports and
// unpacks images and leaves nothing of it outside its directories. The
// lab preloads its nodes' image stores with it, and the tests of image
// imports (imagebundle's containerdtest) run it.
package hostcontainerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// config is containerd's configuration: only what stores, imports and
// unpacks images, so that nothing of it reaches the host outside its own
// directories (no CRI, no NRI socket, no /opt/containerd).
const config = `version = 3
root = %q
state = %q
disabled_plugins = ['io.containerd.grpc.v1.cri', 'io.containerd.cri.v1.runtime', 'io.containerd.cri.v1.images', 'io.containerd.podsandbox.controller.v1.podsandbox', 'io.containerd.nri.v1.nri', 'io.containerd.internal.v1.opt', 'io.containerd.internal.v1.tracing']

[grpc]
  address = %q

[ttrpc]
  address = %q
`

// Containerd is a running containerd.
type Containerd struct {
	// Socket is its gRPC socket's path, in a directory of /tmp's.
	Socket string
	binDir string
	log    string
	cmd    *exec.Cmd
	// exited is closed when the process has exited, with exitErr set.
	exited  chan struct{}
	exitErr error
}

// Endpoint is the socket as a runtime endpoint URL.
func (c *Containerd) Endpoint() string { return "unix://" + c.Socket }

// PID is containerd's process: unshare and sh exec it in the process
// Start started.
func (c *Containerd) PID() int { return c.cmd.Process.Pid }

// Start starts binDir's containerd with its store in root and the rest in
// scratch, and waits until it answers. It runs in its own process group,
// so that a Ctrl-C of its caller does not stop it midway (Stop does), and
// dies with its caller.
func Start(ctx context.Context, binDir, root, scratch string) (*Containerd, error) {
	// A socket's path is short: it lives in a directory of /tmp's.
	sockDir, err := os.MkdirTemp("", "kb-ctr-")
	if err != nil {
		return nil, err
	}
	c := &Containerd{Socket: filepath.Join(sockDir, "c.sock"), binDir: binDir, log: filepath.Join(scratch, "containerd.log"), exited: make(chan struct{})}
	cfg := filepath.Join(scratch, "config.toml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, config, root, filepath.Join(scratch, "state"), c.Socket, c.Socket+".ttrpc"), 0o600); err != nil {
		return nil, err
	}
	log, err := os.Create(c.log)
	if err != nil {
		return nil, err
	}
	defer func() { _ = log.Close() }()
	// containerd makes its default state dir, /run/containerd, whatever
	// its configuration says: it runs in a mount namespace of its own,
	// with a tmpfs of its own over /run, so that the host keeps none.
	c.cmd = exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
		`mount -n -t tmpfs -o mode=0755 kubeboot-containerd-run /run && exec "$0" "$@"`,
		filepath.Join(binDir, "containerd"), "--config", cfg)
	c.cmd.Stdout, c.cmd.Stderr = log, log
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		c.exitErr = c.cmd.Wait()
		_ = os.RemoveAll(sockDir)
		close(c.exited)
	}()
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case <-c.exited:
			return false, fmt.Errorf("containerd exited: %w", c.exitErr)
		default:
		}
		_, err := c.Ctr(ctx, "version")
		return err == nil, nil
	})
	if err != nil {
		_ = c.Stop()
		return nil, fmt.Errorf("containerd on %s: %w: %s", c.Socket, err, c.LogTail())
	}
	return c, nil
}

// Ctr runs the bin dir's ctr against the containerd, in the k8s.io
// namespace, and returns its combined output.
func (c *Containerd) Ctr(ctx context.Context, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, filepath.Join(c.binDir, "ctr"), append([]string{"--address", c.Socket, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
}

// Stop stops the containerd with SIGTERM, killing it after 30 s.
func (c *Containerd) Stop() error {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
		return nil
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
		return errors.New("containerd did not stop in 30s on SIGTERM")
	}
}

// LogTail is the end of containerd's log, for an error.
func (c *Containerd) LogTail() string {
	data, _ := os.ReadFile(c.log)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-10):], "\n")
}
