package imagebundle_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kubeboot/kubeboot/internal/imagebundle"
	"github.com/kubeboot/kubeboot/internal/imagebundle/containerdtest"
)

// BenchmarkImport loads one bundle of about 200 MiB (4 images of 2
// uncompressed random layers of 25 MiB) into a fresh containerd per round,
// with `kubeboot images import` and with `ctr -n k8s.io images import`
// (ctr's default, through containerd's transfer service, and --local, the
// client-side import kubeboot's is like), each run as a child process:
// the time, the child's peak RSS and containerd's (VmHWM).
func BenchmarkImport(b *testing.B) {
	dir := b.TempDir()
	refs, bundle := benchBundle(b, dir)
	kubeboot := buildKubeboot(b, dir)
	binDir := containerdtest.BinDir(b)
	runs := map[string]func(c *containerdtest.Containerd) *exec.Cmd{
		"kubeboot": func(c *containerdtest.Containerd) *exec.Cmd {
			return exec.Command(kubeboot, "images", "import", bundle, "--runtime-endpoint", c.Endpoint())
		},
		"ctr": func(c *containerdtest.Containerd) *exec.Cmd {
			return exec.Command(filepath.Join(binDir, "ctr"), "--address", c.Socket, "-n", "k8s.io", "images", "import", bundle)
		},
		"ctr-local": func(c *containerdtest.Containerd) *exec.Cmd {
			return exec.Command(filepath.Join(binDir, "ctr"), "--address", c.Socket, "-n", "k8s.io", "images", "import", "--local", bundle)
		},
	}
	for _, tool := range []string{"kubeboot", "ctr", "ctr-local"} {
		b.Run(tool, func(b *testing.B) {
			var childRSS, daemonRSS int64
			for b.Loop() {
				b.StopTimer()
				c := containerdtest.Start(b)
				cmd := runs[tool](c)
				b.StartTimer()
				rss := measured(b, cmd)
				b.StopTimer()
				if got := len(c.Images(b)); got != len(refs) {
					b.Fatalf("%s imported %d images, want %d", tool, got, len(refs))
				}
				childRSS = max(childRSS, rss)
				daemonRSS = max(daemonRSS, vmHWM(b, c.PID))
				b.StartTimer()
			}
			b.ReportMetric(float64(childRSS)/1024, "child-peak-MiB")
			b.ReportMetric(float64(daemonRSS)/1024, "containerd-peak-MiB")
		})
	}
}

// benchBundle writes the benchmark's bundle into dir, of images pushed to
// a registry in memory.
func benchBundle(b *testing.B, dir string) ([]string, string) {
	b.Helper()
	host := serveRegistry(b)
	refs := make([]string, 4)
	for i := range refs {
		refs[i] = fmt.Sprintf("%s/bench/image%d:v1", host, i)
		push(b, refs[i], randomImage(b, int64(i), 2, 25<<20, types.OCIUncompressedLayer, runtime.GOARCH))
	}
	return refs, export(b, dir, "bundle.tar", imagebundle.ExportOptions{Refs: refs, From: imagebundle.FromRegistry})
}

// buildKubeboot builds the kubeboot binary into dir.
func buildKubeboot(b *testing.B, dir string) string {
	b.Helper()
	bin := filepath.Join(dir, "kubeboot")
	start := time.Now()
	cmd := exec.Command("go", "build", "-o", bin, "github.com/kubeboot/kubeboot/cmd/kubeboot")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v: %s", err, out)
	}
	b.Logf("built kubeboot in %s", time.Since(start).Round(time.Millisecond))
	return bin
}

// maxRSSEnv makes this test binary measure a command: run it, then print
// its peak RSS (rusage's Maxrss, KiB) as the last line of stderr.
const maxRSSEnv = "KUBEBOOT_BENCH_MAXRSS"

// TestMain is the tests', or with maxRSSEnv set the measuring of a command.
func TestMain(m *testing.M) {
	if os.Getenv(maxRSSEnv) == "" {
		os.Exit(m.Run())
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	err := cmd.Run()
	if cmd.ProcessState == nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "\n%d\n", cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss)
	os.Exit(cmd.ProcessState.ExitCode())
}

// measured runs cmd through this test binary, which forks it from a small
// process (a child's peak RSS counts the memory of the process that forked
// it, until it execs: this one holds the bundle's images), and returns the
// command's peak RSS in KiB.
func measured(b *testing.B, cmd *exec.Cmd) int64 {
	b.Helper()
	wrapped := exec.Command(os.Args[0], cmd.Args...)
	wrapped.Env = append(os.Environ(), maxRSSEnv+"=1")
	out, err := wrapped.CombinedOutput()
	if err != nil {
		b.Fatalf("%s: %v: %s", cmd, err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	kib, err := strconv.ParseInt(lines[len(lines)-1], 10, 64)
	if err != nil {
		b.Fatalf("%s: no peak RSS: %s", cmd, out)
	}
	return kib
}

// vmHWM is a process's peak resident set so far, in KiB.
func vmHWM(b *testing.B, pid int) int64 {
	b.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		if v, ok := strings.CutPrefix(lines.Text(), "VmHWM:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kib
		}
	}
	b.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}
