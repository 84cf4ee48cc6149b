package lab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubeboot/kubeboot/internal/atomicfile"
)

// A node image holds its images already unpacked in containerd's store,
// as kind's does. The lab makes that store once per archive of images:
// the bin dir's containerd, run on this host with a root and a socket of
// its own, imports the archive (kubeboot's image bundle) through the lab's
// `kubeboot images import`, as an air-gapped node loads its images, and
// the store it leaves is cached beside the archive. Every node's
// /var/lib/containerd then starts as a copy of it (preloadNode), made of
// hard links but for the databases containerd writes in place, so no node
// imports the images at its first boot.

// preloadedStore is where the store of archive's images is cached.
func preloadedStore(archive string) string {
	return strings.TrimSuffix(archive, ".tar") + ".containerd"
}

// preloadConfig is the host containerd's configuration: only what
// imports and unpacks images, so that nothing of it reaches the host
// outside its own directories (no CRI, no NRI socket, no /opt/containerd).
const preloadConfig = `version = 3
root = %q
state = %q
disabled_plugins = ['io.containerd.grpc.v1.cri', 'io.containerd.cri.v1.runtime', 'io.containerd.cri.v1.images', 'io.containerd.podsandbox.controller.v1.podsandbox', 'io.containerd.nri.v1.nri', 'io.containerd.internal.v1.opt', 'io.containerd.internal.v1.tracing']

[grpc]
  address = %q

[ttrpc]
  address = %q
`

// preload makes the store of archive's images, unless it is cached, and
// returns its directory: the bin dir's containerd imports them, with the
// kubeboot binary's `images import`. Two labs that preload one archive at
// once make it twice, and the later keeps the earlier's.
func preload(ctx context.Context, binDir, kubeboot, archive string) (string, error) {
	store := preloadedStore(archive)
	if _, err := os.Stat(store); err == nil {
		return store, nil
	}
	tmp, err := os.MkdirTemp(filepath.Dir(archive), ".containerd-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	root := filepath.Join(tmp, "root")
	c, err := startHostContainerd(ctx, binDir, root, tmp)
	if err != nil {
		return "", fmt.Errorf("preload the lab's images: %w", err)
	}
	argv := []string{kubeboot, "images", "import", archive, "--runtime-endpoint", "unix://" + c.socket}
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if stopErr := c.stop(); err == nil && stopErr != nil {
		return "", fmt.Errorf("preload the lab's images: %w", stopErr)
	}
	if err != nil {
		return "", fmt.Errorf("preload the lab's images: %s: %w: %s", strings.Join(argv, " "), err, lastLines(string(out), 10))
	}
	if err := atomicfile.Move(root, store); err != nil {
		if _, statErr := os.Stat(store); statErr == nil {
			return store, nil // another lab preloaded it meanwhile
		}
		return "", err
	}
	return store, nil
}

// hostContainerd is the bin dir's containerd run on this host with a
// root, a state and a socket of its own.
type hostContainerd struct {
	binDir, socket, log string
	process             *os.Process
	// exited is closed when the process has exited, with exitErr set.
	exited  chan struct{}
	exitErr error
}

// startHostContainerd starts containerd with its store in root and the
// rest in scratch, and waits until it answers. Its socket is in a
// directory of /tmp's, the host's: only its /run is its own.
func startHostContainerd(ctx context.Context, binDir, root, scratch string) (*hostContainerd, error) {
	// A socket's path is short: it lives in a directory of /tmp's.
	sockDir, err := os.MkdirTemp("", "kb-ctr-")
	if err != nil {
		return nil, err
	}
	c := &hostContainerd{binDir: binDir, socket: filepath.Join(sockDir, "c.sock"), log: filepath.Join(scratch, "containerd.log"), exited: make(chan struct{})}
	config := filepath.Join(scratch, "config.toml")
	if err := os.WriteFile(config, fmt.Appendf(nil, preloadConfig, root, filepath.Join(scratch, "state"), c.socket, c.socket+".ttrpc"), 0o600); err != nil {
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
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
		`mount -n -t tmpfs -o mode=0755 kubeboot-lab-run /run && exec "$0" "$@"`,
		filepath.Join(binDir, "containerd"), "--config", config)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so that a Ctrl-C of lab up does not stop it
	// midway (stop does); it dies with lab up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c.process = cmd.Process
	go func() {
		c.exitErr = cmd.Wait()
		_ = os.RemoveAll(sockDir)
		close(c.exited)
	}()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case <-c.exited:
			return false, fmt.Errorf("containerd exited: %w", c.exitErr)
		default:
		}
		_, err := c.ctr(ctx, "version")
		return err == nil, nil
	})
	if err != nil {
		_ = c.stop()
		return nil, fmt.Errorf("containerd on %s: %w: %s", c.socket, err, tail(c.log))
	}
	return c, nil
}

// ctr runs ctr against the containerd, in the k8s.io namespace.
func (c *hostContainerd) ctr(ctx context.Context, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, filepath.Join(c.binDir, "ctr"), append([]string{"--address", c.socket, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
}

// stop stops the containerd, killing it after 30 s.
func (c *hostContainerd) stop() error {
	_ = c.process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
		return nil
	case <-time.After(30 * time.Second):
		_ = c.process.Kill()
		<-c.exited
		return errors.New("containerd did not stop in 30s on SIGTERM")
	}
}

// tail is the end of a log file, for an error.
func tail(path string) string {
	data, _ := os.ReadFile(path)
	return lastLines(string(data), 10)
}

// preloadNode lays the preloaded store out as the machine root's
// /var/lib/containerd with `cp -a --link`: directories made anew with
// their owners, modes and extended attributes (an unpacked layer's opaque
// directories carry overlay's), every other file a hard link to the
// store's, since containerd never writes a blob or an unpacked layer in
// place; then the bolt databases, which it does write in place, are
// copied. It marks the node's images loaded, so that its images unit
// does not import them again.
func preloadNode(store, machineRoot string) error {
	dst := filepath.Join(machineRoot, "var/lib/containerd")
	if err := os.MkdirAll(dst, 0o711); err != nil {
		return err
	}
	if out, err := exec.Command("cp", "-a", "--link", store+"/.", dst).CombinedOutput(); err != nil {
		return fmt.Errorf("preload the images of %s: cp: %w: %s", machineRoot, err, lastLines(string(out), 5))
	}
	err := filepath.WalkDir(store, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || !strings.HasSuffix(path, ".db") {
			return err
		}
		target := filepath.Join(dst, strings.TrimPrefix(path, store))
		if err := os.Remove(target); err != nil {
			return err
		}
		if out, err := exec.Command("cp", "-a", path, target).CombinedOutput(); err != nil {
			return fmt.Errorf("cp: %w: %s", err, lastLines(string(out), 5))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("preload the images of %s: %w", machineRoot, err)
	}
	marker := filepath.Join(machineRoot, imagesLoaded)
	if err := os.MkdirAll(filepath.Dir(marker), 0o755); err != nil {
		return err
	}
	return os.WriteFile(marker, nil, 0o644)
}
