package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// machine describes where the figures were measured.
type machine struct {
	cores     int
	cpu       string
	memory    string
	kernel    string
	loadStart string
	// processStart is the median time to start /bin/true and wait for it:
	// the floor under every command timed here.
	processStart time.Duration
}

// versions are the versions of what was measured.
type versions struct {
	kubeboot, kubeadm, etcd string
	// containerd is the lab's runtime: its version line's third field.
	containerd string
	// goKubeboot and goKubeadm are the toolchains that built each binary.
	goKubeboot, goKubeadm string
}

// sizes are the binaries' sizes in bytes.
type sizes struct{ kubeboot, kubeadm int64 }

func readMachine() machine {
	m := machine{cores: runtime.NumCPU(), cpu: "unknown", memory: "unknown", kernel: "unknown", loadStart: loadAverage()}
	m.cpu = procField("/proc/cpuinfo", "model name")
	if kb := procField("/proc/meminfo", "MemTotal"); kb != "" {
		var n int64
		if _, err := fmt.Sscanf(kb, "%d kB", &n); err == nil {
			m.memory = fmt.Sprintf("%.1f GiB", float64(n)/(1<<20))
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = strings.TrimSpace(string(data))
	}
	m.processStart = processStart()
	return m
}

// processStartRuns is how many times processStart runs /bin/true.
const processStartRuns = 50

// processStart is the median wall time of fork, exec and exit of
// /bin/true, or zero where it does not run.
func processStart() time.Duration {
	times := make([]float64, 0, processStartRuns)
	for range processStartRuns {
		start := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			return 0
		}
		times = append(times, time.Since(start).Seconds())
	}
	return time.Duration(summarize(times).median * float64(time.Second))
}

// procField returns the value of the first "key: value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// loadAverage is the 1, 5 and 15 minute load average: how busy the other
// work on the machine kept it.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	fields := strings.Fields(string(data))
	if len(fields) < 3 {
		return "unknown"
	}
	return strings.Join(fields[:3], " ")
}

func readVersions(ctx context.Context, o options) (versions, error) {
	var v versions
	var err error
	if v.kubeboot, err = output(ctx, "git", "describe", "--tags", "--always", "--dirty"); err != nil {
		return v, err
	}
	if v.kubeadm, err = output(ctx, filepath.Join(o.binDir, "kubeadm"), "version", "-o", "short"); err != nil {
		return v, err
	}
	etcd, err := output(ctx, filepath.Join(o.binDir, "etcd"), "--version")
	if err != nil {
		return v, err
	}
	v.etcd = strings.TrimPrefix(strings.SplitN(etcd, "\n", 2)[0], "etcd Version: ")
	containerd, err := output(ctx, filepath.Join(o.binDir, "containerd"), "--version")
	if err != nil {
		return v, err
	}
	if f := strings.Fields(containerd); len(f) >= 3 {
		v.containerd = f[2]
	}
	// `go version FILE` prints "FILE: go1.x.y": the toolchain that built it.
	for _, b := range []struct {
		path string
		dst  *string
	}{{o.kubeboot, &v.goKubeboot}, {filepath.Join(o.binDir, "kubeadm"), &v.goKubeadm}} {
		line, err := output(ctx, o.goBin, "version", b.path)
		if err != nil {
			return v, err
		}
		_, *b.dst, _ = strings.Cut(line, ": ")
	}
	return v, nil
}

func binarySizes(o options) (sizes, error) {
	var s sizes
	for _, b := range []struct {
		path string
		dst  *int64
	}{{o.kubeboot, &s.kubeboot}, {filepath.Join(o.binDir, "kubeadm"), &s.kubeadm}} {
		info, err := os.Stat(b.path)
		if err != nil {
			return s, err
		}
		*b.dst = info.Size()
	}
	return s, nil
}

// output runs a short command and returns its trimmed stdout.
func output(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
