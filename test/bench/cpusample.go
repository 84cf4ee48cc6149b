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
)

// controlPlaneComponents are the process names whose CPU and memory make
// up the control plane's.
var controlPlaneComponents = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

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
// of the control-plane components whose command line names dir (the node's
// dir), and returns the samples once ctx is done.
func sampleControlPlane(ctx context.Context, dir string) <-chan []usage {
	out := make(chan []usage, 1)
	go func() {
		var samples []usage
		for {
			samples = append(samples, readUsage(dir))
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

// readUsage sums the CPU time and RSS of the matching processes now.
func readUsage(dir string) usage {
	u := usage{at: time.Now()}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmdline, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(dir)) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(p, "stat"))
		if err != nil {
			continue
		}
		// comm is in parentheses and may hold spaces; the fields follow.
		open, closing := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
		if open < 0 || closing < open || !slices.Contains(controlPlaneComponents, string(stat[open+1:closing])) {
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
