package machine

import (
	"slices"
	"testing"
)

// TestHierarchiesIn: the host's hierarchies are its cgroup mounts under
// /sys/fs/cgroup (a hybrid host's v1 controllers and its v2 one, or a v2
// host's one), never a cgroup file system mounted elsewhere for a moment,
// as systemd-nspawn mounts the v2 one at /tmp/unifiedXXXXXX while it boots
// a machine, nor the tmpfs that holds them.
func TestHierarchiesIn(t *testing.T) {
	hybrid := `25 31 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
26 25 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:8 - tmpfs tmpfs ro,mode=755
27 26 0:24 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
28 26 0:25 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup rw,xattr,name=systemd
31 26 0:28 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,memory
32 26 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,cpu,cpuacct
912 30 0:24 / /tmp/unified4r5f3m rw,relatime shared:9 - cgroup2 cgroup rw,nsdelegate
913 30 0:25 / /tmp/kb/m1/root/sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
`
	got, err := hierarchiesIn(hybrid)
	want := []string{"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("hybrid host: %q, %v; want %q", got, err, want)
	}
	v2 := "27 26 0:24 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
	if got, err := hierarchiesIn(v2); err != nil || !slices.Equal(got, []string{"/sys/fs/cgroup"}) {
		t.Errorf("v2 host: %q, %v; want [/sys/fs/cgroup]", got, err)
	}
	if got, err := hierarchiesIn("912 30 0:24 / /tmp/unified4r5f3m rw - cgroup2 cgroup rw\n"); err == nil {
		t.Errorf("a host with no hierarchy under /sys/fs/cgroup: %q, want an error", got)
	}
}
