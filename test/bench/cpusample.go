package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	labmachine "github.com/kubeboot/kubeboot/internal/machine"
)

// controlPlaneComponents are the process names whose CPU and memory make
// up the control plane's.
var controlPlaneComponents = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// commLen is the longest comm the kernel keeps (TASK_COMM_LEN less its
// NUL): kube-controller-manager's is "kube-controller".
const commLen = 15

// isComponent says whether comm, a process's name in /proc/<pid>/stat, is
// a control-plane component's.
func isComponent(comm string) bool {
	return slices.ContainsFunc(controlPlaneComponents, func(name string) bool { return name[:min(len(name), commLen)] == comm })
}

// usage is one sample of the control plane's processes.
type usage struct {
	at time.Time
	// cpu is their user + system time so far; rss their resident memory.
	cpu time.Duration
	rss int64
}

// clockTick is the kernel's USER_HZ, the unit of /proc/<pid>/stat's times.
const clockTick = 100

// sampleControlPlane samples, every 250 ms until ctx ends, the processes
// of the control-plane components in machine m, which may not run yet,
// and returns the samples once ctx is done.
func sampleControlPlane(ctx context.Context, m labmachine.Machine) <-chan []usage {
	out := make(chan []usage, 1)
	go func() {
		var samples []usage
		cgroup := ""
		for {
			if cgroup == "" {
				cgroup = machineCgroup(m)
			}
			samples = append(samples, readUsage(cgroup))
			select {
			case <-ctx.Done():
				out <- samples
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return out
}

// machineCgroup is the path of m's cgroup below a hierarchy's root, as
// /proc/<pid>/cgroup names it on the host ("/<parent>/<machine's>"), or
// empty while m has none. Every process of the machine, its containers'
// too, is in a cgroup below it.
func machineCgroup(m labmachine.Machine) string {
	dirs, err := m.Cgroups()
	if err != nil || len(dirs) == 0 {
		return ""
	}
	return "/" + filepath.Base(filepath.Dir(dirs[0])) + "/" + filepath.Base(dirs[0])
}

// inCgroup says whether a /proc/<pid>/cgroup file puts the process in
// cgroup or below it, in any hierarchy.
func inCgroup(procCgroup []byte, cgroup string) bool {
	for line := range strings.Lines(string(procCgroup)) {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) == 3 && (parts[2] == cgroup || strings.HasPrefix(parts[2], cgroup+"/")) {
			return true
		}
	}
	return false
}

// readUsage sums the CPU time and RSS of the control-plane components'
// processes in cgroup now; none while cgroup is empty.
func readUsage(cgroup string) usage {
	u := usage{at: time.Now()}
	if cgroup == "" {
		return u
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		stat, err := os.ReadFile(filepath.Join(p, "stat"))
		if err != nil {
			continue
		}
		// comm is in parentheses and may hold spaces; the fields follow.
		open, closing := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
		if open < 0 || closing < open || !isComponent(string(stat[open+1:closing])) {
			continue
		}
		if cg, err := os.ReadFile(filepath.Join(p, "cgroup")); err != nil || !inCgroup(cg, cgroup) {
			continue
		}
		f := strings.Fields(string(stat[closing+2:]))
		// From the state on: utime is field 14 of stat, stime 15, rss 24.
		if len(f) < 22 {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		rss, _ := strconv.ParseInt(f[21], 10, 64)
		u.cpu += time.Duration(utime+stime) * time.Second / clockTick
		u.rss += rss * int64(os.Getpagesize())
	}
	return u
}

// window is the control plane's CPU time and peak memory between from and
// to: the CPU between the last sample before from and the first after to.
func window(samples []usage, from, to time.Time) (cpu time.Duration, peak int64) {
	var first, last *usage
	for i := range samples {
		s := &samples[i]
		if !s.at.After(from) {
			first = s
		}
		if last == nil && !s.at.Before(to) {
			last = s
		}
		if !s.at.Before(from) && !s.at.After(to) {
			peak = max(peak, s.rss)
		}
	}
	if first == nil || last == nil {
		return 0, peak
	}
	return last.cpu - first.cpu, peak
}
