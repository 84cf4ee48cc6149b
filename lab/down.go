package lab

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubeboot/kubeboot/cri"
)

// Down tears the node down and removes its dir: the kubelet first, so that
// it restarts nothing; then every pod, through containerd's CRI, which
// stops the containers and releases their mounts and networks, again
// until no shim of the node is left (a pod being set up shows only once
// it is); then containerd. What a stopped or crashed containerd left
// behind, or a pod the runtime would not remove, is cleaned up without
// it: its shims, killed; containers through runc's state, then mounts
// under the dir; and the
// node's bridge and, after the machine's last kubelet, the kubelet's
// iptables chains. logf reports each step.
func (n Node) Down(ctx context.Context, logf func(format string, args ...any)) error {
	var errs []error
	if err := n.Kubelet().Stop(30 * time.Second); err != nil {
		errs = append(errs, err)
	} else {
		logf("stopped the kubelet")
	}
	if _, running := n.Containerd().Running(); running {
		removed, err := n.removePods(ctx)
		if err != nil {
			// A container the kubelet was starting when it stopped can
			// run on while the runtime still holds it as created, and the
			// runtime then refuses to remove its pod; runc deletes it
			// below, once containerd has stopped.
			logf("the runtime did not remove every pod (%v): their containers are deleted with runc once containerd has stopped", err)
		} else {
			logf("removed %d pods", removed)
		}
	}
	if err := n.Containerd().Stop(30 * time.Second); err != nil {
		errs = append(errs, err)
	} else {
		logf("stopped containerd")
	}
	if killed, err := killShims(n.Socket, 10*time.Second); err != nil {
		errs = append(errs, err)
	} else if killed > 0 {
		logf("killed %d shims containerd left", killed)
	}
	if err := n.deleteContainers(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := unmountUnder(n.Dir); err != nil {
		errs = append(errs, err)
	}
	if err := removeSocket(n.Socket); err != nil {
		errs = append(errs, err)
	}
	if err := deleteLink(ctx, n.Bridge()); err != nil {
		errs = append(errs, err)
	}
	if err := removeKubeletChains(ctx); err != nil {
		errs = append(errs, err)
	}
	// Shims put their sockets in /run/containerd/s and containerd its pods'
	// network namespaces in /run/netns, whatever its config says; the dirs
	// go when the lab's were the last in them.
	for _, dir := range []string{"/run/containerd/s", "/run/containerd"} {
		_ = os.Remove(dir)
	}
	removeNetnsDir()
	if len(errs) > 0 {
		// Removing the dir would lose the logs that explain the failure.
		return errors.Join(errs...)
	}
	if err := os.RemoveAll(n.Dir); err != nil {
		return fmt.Errorf("remove the lab dir: %w", err)
	}
	logf("removed %s", n.Dir)
	return nil
}

// removePods removes every pod through containerd's CRI until no shim of
// the node is left: a pod the kubelet was creating when it stopped is not
// listed until containerd has set it up, seconds later, so the pods are
// listed again while its shim runs.
func (n Node) removePods(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	client, err := cri.Dial("unix://"+n.Socket, func(p string) string { return p })
	if err != nil {
		return 0, err
	}
	defer func() { _ = client.Close() }()
	total := 0
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		removed, err := client.RemovePods(ctx)
		total += removed
		return len(shimsOf(n.Socket)) == 0, err
	})
	if wait.Interrupted(err) {
		// What remains is killed once containerd has stopped.
		err = nil
	}
	return total, err
}

// shimsOf lists the containerd shims serving the containerd that listens on
// socket: shims outlive a containerd that stops, by design, and name its
// socket in their -address flag.
func shimsOf(socket string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		if !strings.HasPrefix(filepath.Base(argv[0]), "containerd-shim") {
			continue
		}
		if i := slices.Index(argv, "-address"); i >= 0 && i+1 < len(argv) && argv[i+1] == socket {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killShims kills the shims a stopped containerd left behind, the shim of a
// pod it was still setting up when it stopped, and waits up to timeout for
// them to go. It returns how many it killed, or which survived.
func killShims(socket string, timeout time.Duration) (int, error) {
	pids := shimsOf(socket)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	var left []int
	_ = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		left = shimsOf(socket)
		return len(left) == 0, nil
	})
	if len(left) > 0 {
		return 0, fmt.Errorf("shims of %s survived SIGKILL for %s: pids %v", socket, timeout, left)
	}
	return len(pids), nil
}

// deleteContainers force-deletes, with runc, every container whose state is
// still in the node's runc root: none after a clean stop, the orphans of a
// containerd or shim that was killed otherwise.
func (n Node) deleteContainers(ctx context.Context) error {
	roots, err := filepath.Glob(n.containerdDir("runc", "*"))
	if err != nil || len(roots) == 0 {
		return err
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return fmt.Errorf("delete the lab's containers: find runc: %w", err)
	}
	var errs []error
	for _, root := range roots {
		ids, err := os.ReadDir(root)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, id := range ids {
			out, err := exec.CommandContext(ctx, runc, "--root", root, "delete", "--force", id.Name()).CombinedOutput()
			if err != nil {
				errs = append(errs, fmt.Errorf("runc delete %s: %w: %s", id.Name(), err, strings.TrimSpace(string(out))))
			}
		}
	}
	return errors.Join(errs...)
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("list mounts: %w", err)
	}
	var mounts []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			mounts = append(mounts, fields[4])
		}
	}
	slices.SortFunc(mounts, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	var errs []error
	for _, m := range slices.Compact(mounts) {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

// removeSocket removes a CRI socket that a killed containerd left: one that
// is still there but where nothing listens.
func removeSocket(path string) error {
	info, err := os.Lstat(path)
	if err != nil || info.Mode().Type() != fs.ModeSocket {
		return nil
	}
	if conn, err := net.Dial("unix", path); err == nil {
		_ = conn.Close()
		return fmt.Errorf("remove %s: something still listens there", path)
	}
	return os.Remove(path)
}

// deleteLink deletes a network link the lab created, if it exists: the
// bridge plugin leaves the node's bridge behind when its last pod goes.
func deleteLink(ctx context.Context, link string) error {
	if _, err := net.InterfaceByName(link); err != nil {
		return nil
	}
	if out, err := exec.CommandContext(ctx, "ip", "link", "delete", link).CombinedOutput(); err != nil {
		return fmt.Errorf("delete link %s: %w: %s", link, err, strings.TrimSpace(string(out)))
	}
	return nil
}
