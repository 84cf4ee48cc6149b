// Package containerdtest runs the real containerd for tests: the
// containerd and ctr that test/tools built, with a root, a state and a
// socket of their own, in a mount namespace whose /run is its own, without
// the CRI, as the lab's preload runs it; and ctr against it.
package containerdtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// config is the containerd's configuration: only what stores, imports and
// unpacks images.
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
	// Socket is its gRPC socket's path.
	Socket string
	// Root is its store: content, metadata and snapshots.
	Root string
	// BinDir holds its binaries and ctr.
	BinDir string
	// PID is containerd's process.
	PID int
}

// Endpoint is the socket as a runtime endpoint URL.
func (c *Containerd) Endpoint() string { return "unix://" + c.Socket }

// BinDir is the directory of containerd and ctr: $KUBEBOOT_BIN_DIR, else
// test/tools/bin of the module the test runs in. A missing binary, or a
// user other than root, skips the test, and fails it under CI.
func BinDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("KUBEBOOT_BIN_DIR")
	if dir == "" {
		dir = filepath.Join(moduleRoot(t), "test", "tools", "bin")
	}
	for _, bin := range []string{"containerd", "ctr"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			skipOrFail(t, fmt.Sprintf("%s is missing (%v): build it with `make binaries`, or set KUBEBOOT_BIN_DIR", bin, err))
		}
	}
	if os.Geteuid() != 0 {
		skipOrFail(t, "containerd needs root (its own mount namespace, overlay mounts)")
	}
	return dir
}

// skipOrFail skips the test, or fails it under CI, which has what it needs.
func skipOrFail(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// moduleRoot is the nearest directory above the test's own that holds a
// go.mod.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// Start runs containerd until the test ends and waits until it answers.
func Start(t testing.TB) *Containerd {
	t.Helper()
	binDir := BinDir(t)
	scratch := t.TempDir()
	// A socket's path is short: it lives in a directory of /tmp's.
	sockDir, err := os.MkdirTemp("", "kb-ctr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	c := &Containerd{Socket: filepath.Join(sockDir, "c.sock"), Root: filepath.Join(scratch, "root"), BinDir: binDir}
	cfg := filepath.Join(scratch, "config.toml")
	text := fmt.Sprintf(config, c.Root, filepath.Join(scratch, "state"), c.Socket, c.Socket+".ttrpc")
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(scratch, "containerd.log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = log.Close() }()
	// containerd makes /run/containerd whatever its configuration says: a
	// tmpfs of its own over /run keeps the host's untouched.
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
		`mount -n -t tmpfs -o mode=0755 kubeboot-test-run /run && exec "$0" "$@"`,
		filepath.Join(binDir, "containerd"), "--config", cfg)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c.PID = cmd.Process.Pid // unshare and sh exec containerd in this process
	// exited is closed once containerd has exited, with exitErr set.
	exited := make(chan struct{})
	var exitErr error
	go func() {
		exitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() { stop(t, cmd, exited) })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := c.ctr("version"); err == nil {
			return c
		}
		select {
		case <-exited:
			t.Fatalf("containerd exited: %v: %s", exitErr, lastLines(logPath))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd on %s did not answer in 30s: %s", c.Socket, lastLines(logPath))
		}
	}
}

// stop stops containerd with SIGTERM, killing it after 30 s.
func stop(t testing.TB, cmd *exec.Cmd, exited <-chan struct{}) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Error("containerd did not stop in 30s on SIGTERM")
	}
}

// lastLines is the end of a log, for a failure's message.
func lastLines(path string) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-10):], "\n")
}

// ctr runs ctr against the containerd in the k8s.io namespace.
func (c *Containerd) ctr(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return exec.CommandContext(ctx, filepath.Join(c.BinDir, "ctr"), append([]string{"--address", c.Socket, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
}

// Ctr runs ctr against the containerd in the k8s.io namespace and returns
// its output; a failure fails the test.
func (c *Containerd) Ctr(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.ctr(args...)
	if err != nil {
		t.Fatalf("ctr %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Images are the names of the images in the k8s.io namespace, sorted.
func (c *Containerd) Images(t testing.TB) []string { return c.list(t, "images", "ls", "-q") }

// Content are the digests of the blobs in the content store, sorted.
func (c *Containerd) Content(t testing.TB) []string { return c.list(t, "content", "ls", "-q") }

// Snapshots are the keys of the default snapshotter's snapshots, sorted.
func (c *Containerd) Snapshots(t testing.TB) []string { return c.list(t, "snapshots", "ls") }

// list is ctr's output as sorted lines.
func (c *Containerd) list(t testing.TB, args ...string) []string {
	t.Helper()
	var lines []string
	for _, line := range strings.Split(c.Ctr(t, args...), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			lines = append(lines, line)
		}
	}
	slices.Sort(lines)
	return lines
}
