//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// process is a running process seen in /proc.
type process struct {
	pid  int
	argv []string
}

// processesUnder lists the processes, other than this one, whose command
// line names dir or a path under it: the daemons and containers of a lab.
func processesUnder(dir string) []process {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var found []process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(data) == 0 { // gone, or a zombie or kernel thread
			continue
		}
		argv := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		if slices.ContainsFunc(argv, func(arg string) bool {
			return strings.Contains(arg, dir+"/") || strings.HasSuffix(arg, dir)
		}) {
			found = append(found, process{pid: pid, argv: argv})
		}
	}
	return found
}

func describe(procs []process) string {
	var b strings.Builder
	for _, p := range procs {
		line := strings.Join(p.argv, " ")
		if len(line) > 200 {
			line = line[:200] + "..."
		}
		fmt.Fprintf(&b, "  pid %d: %s\n", p.pid, line)
	}
	return b.String()
}

// componentPids maps each control-plane component running for the node to
// its process id; the runtime starts each with the component's name as argv[0].
func (n *node) componentPids() map[string]int {
	pids := map[string]int{}
	for _, p := range processesUnder(n.root) {
		name := filepath.Base(p.argv[0])
		if slices.Contains(components, name) {
			pids[name] = p.pid
		}
	}
	return pids
}

// machinePid is the pid, in its machine's PID namespace, of a process
// of a machine that the host sees as pid: the second of its NSpid.
func machinePid(t *testing.T, pid int) int {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if fields := strings.Fields(line); len(fields) > 2 && fields[0] == "NSpid:" {
			inner, err := strconv.Atoi(fields[2])
			if err != nil {
				t.Fatal(err)
			}
			return inner
		}
	}
	t.Fatalf("process %d is in no PID namespace below the host's", pid)
	return 0
}

// dumpLogs logs the tail of each component's newest log, from the
// machine's disk.
func (n *node) dumpLogs() {
	pods := filepath.Join(n.m.Root(), "var/log/pods")
	for _, c := range components {
		f := newestFile(filepath.Join(pods, "kube-system_"+c+"-"+n.name+"_*", c, "*.log"))
		if f == "" {
			n.t.Logf("no log of %s under %s", c, pods)
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			n.t.Logf("--- %s: %v", f, err)
			continue
		}
		n.t.Logf("--- last lines of %s ---\n%s", f, testsupport.LastLines(string(data), 40))
	}
}

// newestFile is the most recently modified file matching a glob.
func newestFile(pattern string) string {
	matches, _ := filepath.Glob(pattern)
	var newest string
	var newestTime time.Time
	for _, m := range matches {
		if info, err := os.Stat(m); err == nil && info.ModTime().After(newestTime) {
			newest, newestTime = m, info.ModTime()
		}
	}
	return newest
}

// settleTimeout bounds how long the kubelet may take to reflect a change:
// register the node, run or stop a pod, publish a mirror pod.
const settleTimeout = 90 * time.Second

// pollInterval is how often eventually and consistently check.
const pollInterval = 250 * time.Millisecond

// eventually polls check until it returns nil, and fails the test with its
// last error when settleTimeout passes.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still false after %s: %v", what, settleTimeout, err)
		}
		time.Sleep(pollInterval)
	}
}

// consistently polls check for the whole duration and fails the test at the
// first error: it proves that something does not happen.
func consistently(t *testing.T, duration time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(duration)
	for time.Now().Before(deadline) {
		if err := check(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(pollInterval)
	}
}
