package machine_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/machine"
)

// requireNspawn fails under CI, and skips elsewhere, when this host cannot
// boot machines.
func requireNspawn(t *testing.T) {
	t.Helper()
	missing := ""
	if os.Geteuid() != 0 {
		missing = "root"
	} else if _, err := exec.LookPath("systemd-nspawn"); err != nil {
		missing = "systemd-nspawn (Debian's systemd-container)"
	} else if _, err := os.Stat("/usr/lib/systemd/systemd"); err != nil {
		missing = "systemd"
	}
	if missing == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("booting a machine needs %s", missing)
	}
	t.Skipf("booting a machine needs %s", missing)
}

func output(t *testing.T, m machine.Machine, argv ...string) string {
	t.Helper()
	out, err := m.Output(context.Background(), argv...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// runSystemd is where systemd-nspawn keeps its state on the host.
const runSystemd = "/run/systemd"

// hostState is what a machine must never change on the host. (Not all of
// /run: other packages' tests, run beside this one, take locks there.)
func hostState(t *testing.T) map[string][]string {
	t.Helper()
	state := map[string][]string{}
	for _, dir := range []string{"/run/systemd", "/run/systemd/nspawn/locks", "/run/systemd/nspawn/propagate", "/run/containerd", "/run/netns", "/etc/kubernetes", "/var/lib/kubelet", "/etc/systemd/system"} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			state[dir] = append(state[dir], e.Name())
		}
	}
	return state
}

// cgroupLine returns the path, in /proc/self/cgroup's text, of the memory
// controller's hierarchy on cgroup v1, or of the unified one on v2.
func cgroupLine(text string) string {
	for _, line := range strings.Split(text, "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), "memory") {
			return parts[2]
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return rest
		}
	}
	return ""
}

// TestMachine boots two machines and checks that each is a machine of its
// own (systemd as PID 1, its hostname and machine-id, cgroups its systemd
// manages, memory limits included), that a reboot keeps its disk (what
// it installed in /usr too, which the host's /usr never sees) and empties
// its /run, and that removing them leaves nothing on the host.
func TestMachine(t *testing.T) {
	requireNspawn(t)
	ctx := context.Background()
	before := hostState(t)
	// systemd-nspawn makes /run/systemd on a host without it, and the
	// machines' removal leaves it empty: the lab removes it (with a marker
	// of its own, as it does /run/netns), and so does this test.
	if _, err := os.Stat(runSystemd); os.IsNotExist(err) {
		t.Cleanup(func() { _ = os.Remove(runSystemd) })
	}
	dir := t.TempDir()
	shared := filepath.Join(dir, "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	machines := []machine.Machine{{Name: "kbm1", Dir: filepath.Join(dir, "m1")}, {Name: "kbm2", Dir: filepath.Join(dir, "m2"), Shared: []string{shared}}}
	t.Cleanup(func() {
		for _, m := range machines {
			_ = m.Remove(5 * time.Second)
		}
	})
	ids := map[string]bool{}
	for _, m := range machines {
		start := time.Now()
		if err := m.Boot(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("TIMING: boot of %s: %s", m.Name, time.Since(start).Round(time.Millisecond))
		if got := output(t, m, "cat", "/proc/1/comm"); got != "systemd" {
			t.Errorf("%s: PID 1 is %q, want systemd", m.Name, got)
		}
		// awk is one of Debian's alternatives: the shared /usr's link
		// leads through the machine's own /etc/alternatives.
		if got := output(t, m, "awk", "BEGIN { print \"awk\" }"); got != "awk" {
			t.Errorf("%s: awk printed %q", m.Name, got)
		}
		if got := output(t, m, "hostname"); got != m.Name {
			t.Errorf("%s: hostname %q", m.Name, got)
		}
		ids[output(t, m, "cat", "/etc/machine-id")] = true
		// The machines share root's inotify instances with the host: only
		// systemd and D-Bus hold any, no getty, password agent or logind.
		holders := output(t, m, "sh", "-c", `for p in /proc/[0-9]*; do ls -l $p/fd 2>/dev/null | grep -q anon_inode:inotify && cat $p/comm; done | sort -u`)
		for holder := range strings.FieldsSeq(holders) {
			if !slices.Contains([]string{"systemd", "systemd-journal", "dbus-daemon"}, holder) {
				t.Errorf("%s: %s holds an inotify instance; only systemd, journald and D-Bus may", m.Name, holder)
			}
		}
		// A transient unit with a memory limit: the machine's systemd
		// creates its cgroup in the memory controller, which it can only
		// do in cgroups that are its own and writable.
		cgroup := output(t, m, "systemd-run", "--quiet", "--wait", "--pipe", "--unit=probe", "-p", "MemoryMax=64M", "cat", "/proc/self/cgroup")
		if got := cgroupLine(cgroup); got != "/system.slice/probe.service" {
			t.Errorf("%s: a unit's memory cgroup is %q, want /system.slice/probe.service:\n%s", m.Name, got, cgroup)
		}
	}
	if len(ids) != len(machines) {
		t.Errorf("the machines share a machine-id: %v", ids)
	}

	m := machines[0]
	leader, _ := m.Leader()
	// A package's install writes /usr: on the machine's disk, not the
	// host's /usr.
	output(t, m, "sh", "-c", "echo disk > /var/marker && echo run > /run/marker && mkdir /sys/fs/cgroup/pids/stale.slice && echo installed > /usr/bin/kb-installed")
	if _, err := os.Stat("/usr/bin/kb-installed"); err == nil {
		t.Errorf("the machine's install into /usr wrote the host's /usr")
	}
	// The package database describes the shared /usr: the machine's dpkg
	// knows the host's packages, and what it records (a stat override of
	// the machine's own, with a group of the host's packages) stays on
	// the machine's disk.
	hostOverrides, err := os.ReadFile("/var/lib/dpkg/statoverride")
	if err != nil {
		t.Fatal(err)
	}
	if got := output(t, m, "dpkg-query", "-W", "-f=${Status}", "systemd"); got != "install ok installed" {
		t.Errorf("the machine's dpkg says of systemd: %q", got)
	}
	output(t, m, "sh", "-c", "mkdir /var/kb-probe && dpkg-statoverride --add root messagebus 750 /var/kb-probe")
	if got := output(t, m, "dpkg-statoverride", "--list", "/var/kb-probe"); got != "root messagebus 750 /var/kb-probe" {
		t.Errorf("the machine's dpkg recorded %q", got)
	}
	if after, err := os.ReadFile("/var/lib/dpkg/statoverride"); err != nil || string(after) != string(hostOverrides) {
		t.Errorf("the machine's dpkg wrote the host's database: %v\n%s", err, after)
	}
	start := time.Now()
	if err := m.Reboot(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING: reboot of %s: %s", m.Name, time.Since(start).Round(time.Millisecond))
	if again, _ := m.Leader(); again == leader {
		t.Errorf("after the reboot, PID 1 is the same process (%d)", leader)
	}
	if got := output(t, m, "cat", "/var/marker"); got != "disk" {
		t.Errorf("after the reboot, /var/marker holds %q", got)
	}
	if got := output(t, m, "cat", "/usr/bin/kb-installed"); got != "installed" {
		t.Errorf("after the reboot, the file installed in /usr holds %q", got)
	}
	if got := output(t, machines[1], "sh", "-c", "ls /usr/bin/kb-installed 2>/dev/null || echo absent"); got != "absent" {
		t.Errorf("another machine sees the file one installed in its /usr: %s", got)
	}
	if got := output(t, m, "sh", "-c", "ls /run/marker 2>/dev/null || echo gone"); got != "gone" {
		t.Errorf("after the reboot, /run still holds %s", got)
	}
	// A cgroup of the last boot is gone, as on a real machine.
	if got := output(t, m, "sh", "-c", "ls -d /sys/fs/cgroup/pids/stale.slice 2>/dev/null || echo gone"); got != "gone" {
		t.Errorf("after the reboot, the cgroup %s of the last boot is still there", got)
	}

	// A shared directory is the host's, at the same path.
	output(t, machines[1], "sh", "-c", "echo from-machine > "+shared+"/written")
	if got, err := os.ReadFile(filepath.Join(shared, "written")); err != nil || string(got) != "from-machine\n" {
		t.Errorf("the host reads %q (%v) from the shared directory, want what the machine wrote", got, err)
	}

	// A service of the machine goes with it.
	output(t, machines[1], "systemd-run", "--quiet", "--unit=long", "sleep", "4242.5")
	// systemd-run returns once the unit has started, maybe before its
	// process has exec'd sleep.
	var procs []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if procs = processesNaming("4242.5"); len(procs) == 1 {
			break
		}
	}
	if len(procs) != 1 {
		t.Errorf("the machine's service runs as %v, want one process on the host", procs)
	}
	for _, m := range machines {
		if err := m.Remove(20 * time.Second); err != nil {
			t.Fatal(err)
		}
		if _, running := m.Leader(); running {
			t.Errorf("%s still runs after Remove", m.Name)
		}
		if left, err := m.Cgroups(); err != nil || len(left) > 0 {
			t.Errorf("%s: cgroups left after Remove: %v %v", m.Name, left, err)
		}
		if _, err := os.Stat(m.Dir); err == nil {
			t.Errorf("%s: %s left after Remove", m.Name, m.Dir)
		}
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mounts), dir) {
		t.Errorf("mounts under %s left on the host", dir)
	}
	for _, name := range []string{dir, "4242.5"} {
		if procs := processesNaming(name); len(procs) > 0 {
			t.Errorf("processes left: %v", procs)
		}
	}
	after := hostState(t)
	for d, names := range before {
		if !slices.Equal(names, after[d]) {
			t.Errorf("the host's %s changed:\nbefore %q\nafter  %q", d, names, after[d])
		}
	}
	for d := range after {
		if _, ok := before[d]; !ok {
			t.Errorf("the host's %s appeared: %q", d, after[d])
		}
	}
}

// processesNaming lists the command lines that hold s.
func processesNaming(s string) []string {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var found []string
	for _, f := range cmdlines {
		if data, err := os.ReadFile(f); err == nil && strings.Contains(string(data), s) {
			found = append(found, strings.ReplaceAll(string(data), "\x00", " "))
		}
	}
	return found
}
