// Package machine runs a lab node as a machine of its own on this host:
// systemd as PID 1 in systemd-nspawn, with its own PID, mount, UTS, IPC,
// cgroup and network namespaces, its own /etc, /var, /run and /tmp, its own
// machine-id and hostname, and the host's /usr shared read-only beneath
// the layers the lab installs (the kubelet, containerd, their units). Each
// machine has a cgroup of its own in every hierarchy of the host, made
// writable inside it, so that its systemd and kubelet manage its slices
// and QoS cgroups as on a real node. The package knows nothing of
// Kubernetes: it boots, runs commands in, powers off and removes machines.
package machine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Machine is one machine: its name and the directory that holds its root,
// pid file and console log.
type Machine struct {
	// Name is the machine's hostname.
	Name string
	// Dir holds root/ (the machine's root file system), nspawn.pid and
	// console.log.
	Dir string
	// NetNS, when set, is the path of the network namespace the machine
	// joins (the lab's node namespace, wired to its bridge); empty gives
	// the machine a private one with loopback only.
	NetNS string
	// UsrLayers are directories laid over the host's /usr, lowest first:
	// the binaries and units the lab installs. Neither they nor the host's
	// /usr are written: what the machine writes to /usr, as a package
	// manager installing a new release, goes to usrChanges, on its disk.
	UsrLayers []string
	// Binds are host paths bound read-only into the machine, as
	// "host:inside" or a path bound at the same place.
	Binds []string
	// Shared are host paths bound read-write, as "host:inside" or a path
	// bound at the same place: what the machine writes there, the host
	// sees at once, as with a host directory mounted into a kind node.
	Shared []string
}

// Root is the machine's root file system.
func (m Machine) Root() string { return filepath.Join(m.Dir, "root") }

// usrChanges holds what the machine wrote to its /usr, the top of its
// overlay: kept across reboots, like the rest of its disk.
func (m Machine) usrChanges() string { return filepath.Join(m.Dir, "usr") }

// hostPackages is the host's package database, which describes the
// shared /usr: the machine sees it beneath its own changes (dpkgChanges),
// so that dpkg in the machine knows what its /usr holds, and a package
// it installs, as a node's provisioning does, is recorded on its own
// disk only.
const hostPackages = "/var/lib/dpkg"

// dpkgChanges holds what the machine's dpkg wrote to its database.
func (m Machine) dpkgChanges() string { return filepath.Join(m.Dir, "dpkg") }

// pidFile holds the pid of the machine's systemd-nspawn.
func (m Machine) pidFile() string { return filepath.Join(m.Dir, "nspawn.pid") }

// consoleLog receives what the machine prints on its console.
func (m Machine) consoleLog() string { return filepath.Join(m.Dir, "console.log") }

// bootTimeout bounds how long Boot waits for systemd to start the
// machine's units.
const bootTimeout = 2 * time.Minute

// Boot starts the machine: it creates the root when the machine is new
// (see Prepare), places the machine in cgroups of its own, cleared of its
// last boot's, and starts systemd-nspawn detached from this process, then
// waits until the machine's systemd has its units under way: running,
// degraded when a unit failed, or still starting a unit that takes long,
// such as an unattended node's bootstrap. A machine that already runs is
// left as it is.
func (m Machine) Boot(ctx context.Context) error {
	if _, running := m.Leader(); running {
		return nil
	}
	if err := m.Prepare(); err != nil {
		return err
	}
	// A machine boots with no cgroup of its last boot, as a real one does:
	// the slices its systemd and kubelet made in the v1 controllers
	// outlive it, and a kubelet that finds its old containers' cgroups
	// waits on them before it starts any pod.
	if err := m.clearCgroups(); err != nil {
		return err
	}
	cgroups, err := m.makeCgroups()
	if err != nil {
		return err
	}
	nspawn, err := exec.LookPath("systemd-nspawn")
	if err != nil {
		return fmt.Errorf("boot machine %s: systemd-nspawn is missing: install Debian's systemd-container package: %w", m.Name, err)
	}
	console, err := os.OpenFile(m.consoleLog(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("boot machine %s: %w", m.Name, err)
	}
	defer func() { _ = console.Close() }()
	// A shell joins the machine's cgroups, then becomes systemd-nspawn, so
	// that nspawn and everything it starts is in them from the first
	// instruction; the host is cgroup v1, where no clone flag does this.
	script := `while [ "$1" != -- ]; do echo $$ > "$1" || exit 1; shift; done; shift; exec "$@"`
	args := append([]string{"-c", script, "sh"}, cgroups...)
	args = append(append(args, "--", nspawn), m.nspawnArgs()...)
	cmd := exec.Command("/bin/sh", args...)
	cmd.Stdout, cmd.Stderr = console, console
	// SYSTEMD_SECCOMP=0: the node's runc needs the keyring and other calls
	// nspawn's filter refuses; a kind node runs unconfined for the same
	// reason. SYSTEMD_NSPAWN_API_VFS_WRITABLE: /sys and /proc/sys are the
	// node's to write, as the kubelet and kube-proxy do.
	cmd.Env = append(os.Environ(), "SYSTEMD_SECCOMP=0", "SYSTEMD_NSPAWN_API_VFS_WRITABLE=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("boot machine %s: %w", m.Name, err)
	}
	if err := os.WriteFile(m.pidFile(), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600); err != nil {
		_ = cmd.Process.Kill()
		return fmt.Errorf("boot machine %s: %w", m.Name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := m.waitBooted(ctx, exited); err != nil {
		// A machine that did not boot is not left half up, where the next
		// Boot would take it for running.
		_ = m.PowerOff(10 * time.Second)
		return err
	}
	return nil
}

// nspawnArgs are systemd-nspawn's flags for the machine. --keep-unit and
// --register=no: the host has no system bus and no machined; the machine
// stays in the cgroups Boot placed it in.
func (m Machine) nspawnArgs() []string {
	args := []string{
		"--directory=" + m.Root(),
		// The machine's name for nspawn is unique on the host, as its
		// state under /run/systemd/nspawn is named after it; its
		// hostname is Name.
		"--machine=" + m.cgroupName(),
		"--hostname=" + m.Name,
		// The init script as PID 1, which becomes systemd; SIGRTMIN+3 is
		// systemd's request to power off, sent when nspawn is told to stop.
		"--kill-signal=SIGRTMIN+3",
		"--keep-unit", "--register=no", "--link-journal=no",
		"--console=read-only",
		"--capability=all",
		"--bind=/dev/kmsg",
	}
	args = append(args, "--overlay="+strings.Join(slices.Concat([]string{"/usr"}, m.UsrLayers, []string{m.usrChanges(), "/usr"}), ":"))
	if _, err := os.Stat(hostPackages); err == nil {
		args = append(args, "--overlay="+strings.Join([]string{hostPackages, m.dpkgChanges(), hostPackages}, ":"))
	}
	if m.NetNS != "" {
		args = append(args, "--network-namespace-path="+m.NetNS)
	} else {
		args = append(args, "--private-network")
	}
	for _, b := range m.Binds {
		args = append(args, "--bind-ro="+b)
	}
	for _, dir := range m.Shared {
		args = append(args, "--bind="+dir)
	}
	return append(args, initPath)
}

// waitBooted waits until the machine's systemd reports that start-up is
// over, or nspawn exits, or the boot times out.
func (m Machine) waitBooted(ctx context.Context, exited <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, bootTimeout)
	defer cancel()
	var last string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-exited:
			return false, fmt.Errorf("boot machine %s: systemd-nspawn exited (%w); the end of %s:\n%s", m.Name, err, m.consoleLog(), m.consoleTail())
		default:
		}
		out, _ := m.Output(ctx, "systemctl", "is-system-running")
		last = strings.TrimSpace(string(out))
		switch last {
		case "running", "degraded":
			return true, nil
		case "starting":
			// Booted once nothing but long-running units' jobs is left:
			// the basic system is up.
			return m.reached(ctx, "basic.target"), nil
		}
		return false, nil
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("boot machine %s: systemd is %q after %s; the end of %s:\n%s", m.Name, last, bootTimeout, m.consoleLog(), m.consoleTail())
	}
	return err
}

// reached says whether the machine's systemd has reached target.
func (m Machine) reached(ctx context.Context, target string) bool {
	out, err := m.Output(ctx, "systemctl", "is-active", target)
	return err == nil && strings.TrimSpace(string(out)) == "active"
}

// consoleTail returns the last lines of the machine's console log.
func (m Machine) consoleTail() string {
	data, _ := os.ReadFile(m.consoleLog())
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-15):], "\n")
}

// Leader returns the pid, on the host, of the machine's PID 1 while the
// machine runs: the child of its systemd-nspawn that is in a PID namespace
// of its own (while nspawn sets the machine up, its child is still in the
// host's).
func (m Machine) Leader() (int, bool) {
	nspawn, ok := m.nspawnPid()
	if !ok {
		return 0, false
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", nspawn, nspawn))
	if err != nil {
		return 0, false
	}
	hostNS, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", nspawn))
	if err != nil {
		return 0, false
	}
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err == nil && ns != hostNS {
			return pid, true
		}
	}
	return 0, false
}

// nspawnPid returns the pid of the machine's systemd-nspawn while it runs:
// the pid file's, if that process is systemd-nspawn for this machine's
// root (a pid is reused once its process has gone).
func (m Machine) nspawnPid() (int, bool) {
	data, err := os.ReadFile(m.pidFile())
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return 0, false
	}
	argv := strings.Split(string(cmdline), "\x00")
	if filepath.Base(argv[0]) != "systemd-nspawn" || !slices.Contains(argv, "--directory="+m.Root()) {
		return 0, false
	}
	return pid, true
}

// Command returns a command that runs argv inside the machine: in all its
// namespaces, as root, with a node's PATH.
func (m Machine) Command(ctx context.Context, argv ...string) (*exec.Cmd, error) {
	leader, running := m.Leader()
	if !running {
		return nil, fmt.Errorf("machine %s is not running", m.Name)
	}
	args := append([]string{"--target", strconv.Itoa(leader), "--all", "--", "/usr/bin/env", "-i",
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}, argv...)
	return exec.CommandContext(ctx, "nsenter", args...), nil
}

// Run runs argv inside the machine with the streams given.
func (m Machine) Run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, argv ...string) error {
	cmd, err := m.Command(ctx, argv...)
	if err != nil {
		return err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	return cmd.Run()
}

// Output runs argv inside the machine and returns its stdout; the error
// carries its stderr.
func (m Machine) Output(ctx context.Context, argv ...string) ([]byte, error) {
	cmd, err := m.Command(ctx, argv...)
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("in machine %s: %s: %w: %s", m.Name, strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// PowerOff shuts the machine down as `poweroff` would, and kills it when
// it has not stopped within timeout: every process of the machine is in
// its PID namespace, and goes with its PID 1.
func (m Machine) PowerOff(timeout time.Duration) error {
	nspawn, running := m.nspawnPid()
	if running {
		// nspawn turns SIGTERM into systemd's poweroff request.
		_ = syscall.Kill(nspawn, syscall.SIGTERM)
		err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
			_, running := m.nspawnPid()
			return !running, nil
		})
		if err != nil {
			if leader, ok := m.Leader(); ok {
				_ = syscall.Kill(leader, syscall.SIGKILL)
			}
			_ = syscall.Kill(nspawn, syscall.SIGKILL)
			if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				_, running := m.nspawnPid()
				return !running, nil
			}); err != nil {
				return fmt.Errorf("power off machine %s: systemd-nspawn (pid %d) survived SIGKILL", m.Name, nspawn)
			}
		}
	}
	if err := os.Remove(m.pidFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("power off machine %s: %w", m.Name, err)
	}
	return nil
}

// Reboot powers the machine off and boots it again: its disk (/etc, /var)
// is kept, its /run and /tmp start empty.
func (m Machine) Reboot(ctx context.Context, timeout time.Duration) error {
	if err := m.PowerOff(timeout); err != nil {
		return err
	}
	return m.Boot(ctx)
}

// Remove powers the machine off (killing it after timeout: at once for
// 0), removes its cgroups and its directory.
func (m Machine) Remove(timeout time.Duration) error {
	if err := m.PowerOff(timeout); err != nil {
		return err
	}
	if err := m.clearCgroups(); err != nil {
		return err
	}
	if err := removeNspawnState(m.Root(), m.cgroupName()); err != nil {
		return fmt.Errorf("remove machine %s: %w", m.Name, err)
	}
	if err := os.RemoveAll(m.Dir); err != nil {
		return fmt.Errorf("remove machine %s: %w", m.Name, err)
	}
	// The dirs go with the host's last machine.
	removeCgroupParent()
	for _, d := range []string{nspawnLocks, nspawnPropagate, filepath.Dir(nspawnLocks)} {
		_ = syscall.Rmdir(d)
	}
	return nil
}

// Where systemd-nspawn keeps, on the host, a lock of each machine's root
// (inode-<device>:<inode>) and each machine's mount propagation dir; it
// leaves both behind.
const (
	nspawnLocks     = "/run/systemd/nspawn/locks"
	nspawnPropagate = "/run/systemd/nspawn/propagate"
)

// removeNspawnState removes what systemd-nspawn kept of the machine whose
// root and machine name are given.
func removeNspawnState(root, name string) error {
	var st syscall.Stat_t
	if err := syscall.Stat(root, &st); err == nil {
		lock := filepath.Join(nspawnLocks, fmt.Sprintf("inode-%d:%d", st.Dev, st.Ino))
		if err := os.Remove(lock); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return os.RemoveAll(filepath.Join(nspawnPropagate, name))
}
