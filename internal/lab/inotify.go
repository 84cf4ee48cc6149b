package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The inotify instances a node's processes hold, measured on a lab of a
// control plane and eight workers once every node was Ready: on each
// node 12 (systemd 2, D-Bus 1, containerd 2, the kubelet 6, kube-proxy 1),
// and on a control-plane node 17 more (the API server 7, the
// controller-manager 8, the scheduler 1, the kubelet 1). While a node
// comes up, `lab up` follows its journal with one more.
const (
	inotifyPerNode         = 12
	inotifyPerControlPlane = 17
)

// maxInotifyInstances is the file that holds how many inotify instances
// each user may hold.
const maxInotifyInstances = "/proc/sys/fs/inotify/max_user_instances"

// HostInotify reads the host's inotify budget: the instances each user
// may hold, and those root's processes (a lab's machines' among them)
// hold now. ok is false on a host without the limit's file.
func HostInotify() (limit, held int, ok bool, err error) {
	data, err := os.ReadFile(maxInotifyInstances)
	if err != nil {
		return 0, 0, false, nil
	}
	limit, err = strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0, 0, false, fmt.Errorf("read %s: %q is no number", maxInotifyInstances, data)
	}
	return limit, rootInotifyInstances("/proc"), true, nil
}

// checkInotify refuses a lab whose nodes would run out of inotify
// instances, given the host's limit and the instances root holds
// already. The nodes' processes are all root's in the host's user
// namespace, so together with the host's own they get the host's
// fs.inotify.max_user_instances, 128 by default: a kubelet that cannot
// have one exits at its start ("inotify_init: too many open files"), over
// and over, and its node never registers.
func (c *Cluster) checkInotify(limit, held int) error {
	cps := len(c.ControlPlanes())
	need := len(c.Nodes)*inotifyPerNode + cps*inotifyPerControlPlane
	if held+need <= limit {
		return nil
	}
	return fmt.Errorf("%s: nodes: %d nodes (%d of them control planes) need about %d inotify instances, and root holds %d already of the %d that fs.inotify.max_user_instances allows: "+
		"raise it on this host (`sysctl -w fs.inotify.max_user_instances=512`, as kind's nodes need too), or describe fewer nodes",
		c.source, len(c.Nodes), cps, need, held, limit)
}

// rootInotifyInstances counts the inotify instances that root's
// processes hold, from the proc file system at proc.
func rootInotifyInstances(proc string) int {
	pids, _ := filepath.Glob(filepath.Join(proc, "[0-9]*"))
	held := 0
	for _, pid := range pids {
		if !ownedByRoot(filepath.Join(pid, "status")) {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join(pid, "fd"))
		for _, fd := range fds {
			if target, err := os.Readlink(filepath.Join(pid, "fd", fd.Name())); err == nil && target == "anon_inode:inotify" {
				held++
			}
		}
	}
	return held
}

// ownedByRoot says whether the process whose status file is at path runs
// with root's real user ID, the one its inotify instances are counted
// against.
func ownedByRoot(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(data)) {
		if ids, ok := strings.CutPrefix(line, "Uid:"); ok {
			f := strings.Fields(ids)
			return len(f) > 0 && f[0] == "0"
		}
	}
	return false
}
