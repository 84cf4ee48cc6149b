//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The components kubeboot runs as static pods, in start order.
var components = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// staticPods are the manifests init writes: the components' and the CSR
// approver's.
var staticPods = append(slices.Clone(components), "kubeboot-csr-approver")

// kubernetesVersion is what the API server must report: the version the
// binaries in KUBEBOOT_BIN_DIR are built at and kubeboot's default.
const kubernetesVersion = "v1.36.3"

// neededBinaries are the binaries of KUBEBOOT_BIN_DIR the suite runs.
var neededBinaries = []string{
	"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
	"kubelet", "kubectl", "kubeadm", "crictl", "containerd", "containerd-shim-runc-v2", "ctr", "pause",
}

var (
	// kubebootBin is the kubeboot binary TestMain builds.
	kubebootBin string
	// kubebootDeb is kubeboot's .deb of kubebootBin, which every lab
	// machine installs.
	kubebootDeb string
	// binDir holds the real etcd, Kubernetes and crictl binaries.
	binDir string
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

// runSuite checks the environment, builds kubeboot once, runs the tests
// and reports the suite's duration.
func runSuite(m *testing.M) int {
	start := time.Now()
	if err := checkEnvironment(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	tmp, err := os.MkdirTemp("", "kb-e2e-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	kubebootBin = filepath.Join(tmp, "kubeboot")
	build := exec.Command("go", "build", "-o", kubebootBin, "github.com/kubeboot/kubeboot/cmd/kubeboot")
	// Static, as `make build` makes it: kubeboot's own pods run it in the
	// pause image, which holds no libc.
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: build kubeboot: %v\n", err)
		return 1
	}
	// Its .deb, as `make package` makes it.
	kubebootDeb = filepath.Join(tmp, "kubeboot.deb")
	pkg := exec.Command("go", "run", "github.com/kubeboot/kubeboot/cmd/kubeboot-release", "--deb", kubebootDeb, "--binary", kubebootBin, "--version", "v0.0.0-e2e")
	pkg.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(start.Unix(), 10))
	pkg.Stdout, pkg.Stderr = io.Discard, os.Stderr
	if err := pkg.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: package kubeboot: %v\n", err)
		return 1
	}
	hostBefore, err := readHost()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	code := runDigested(m)
	sharedRunDirs.remove()
	if err := checkHost(hostBefore); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		code = 1
	}
	fmt.Fprintf(os.Stderr, "e2e: suite took %s\n", time.Since(start).Round(100*time.Millisecond))
	return code
}

// runDigested runs the tests with their output passing through a
// failureDigest, and prints the digest after them.
func runDigested(m *testing.M) int {
	stdout := os.Stdout
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	var digest failureDigest
	out := &drainingWriter{w: stdout}
	done := make(chan struct{})
	go func() {
		digest.read(io.TeeReader(r, out))
		close(done)
	}()
	os.Stdout = w
	code := m.Run()
	os.Stdout = stdout
	_ = w.Close()
	// A process a test left behind may hold the pipe open: there is then
	// no digest.
	select {
	case <-done:
		digest.write(stdout)
	case <-time.After(5 * time.Second):
		fmt.Fprintln(os.Stderr, "e2e: no digest of the failures: a process the tests started still holds their output")
	}
	if out.err != nil {
		fmt.Fprintf(os.Stderr, "e2e: some of the tests' output was lost: %v\n", out.err)
		code = 1
	}
	return code
}

// drainingWriter passes writes on to w until one fails, and then takes
// and drops the rest: the tests' output pipe must always be read, or a
// process writing to it would block, or die of SIGPIPE once its reader
// is gone (as on a full disk).
type drainingWriter struct {
	w   io.Writer
	err error
}

// Write passes p on to w unless a write has failed before; it never fails.
func (d *drainingWriter) Write(p []byte) (int, error) {
	if d.err == nil {
		_, d.err = d.w.Write(p)
	}
	return len(p), nil
}

// checkEnvironment fails, never skips, when the suite cannot run here.
func checkEnvironment() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("the suite runs the real kubelet, which needs root: run it as root")
	}
	binDir = os.Getenv("KUBEBOOT_BIN_DIR")
	if binDir == "" {
		return fmt.Errorf("KUBEBOOT_BIN_DIR is not set: run the suite with `make e2e`, or build the binaries with `make binaries` and set KUBEBOOT_BIN_DIR=test/tools/bin")
	}
	abs, err := filepath.Abs(binDir)
	if err != nil {
		return err
	}
	binDir = abs
	for _, name := range neededBinaries {
		path := filepath.Join(binDir, name)
		if info, err := os.Stat(path); err != nil || info.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("%s is missing or not executable in KUBEBOOT_BIN_DIR=%s: build the binaries with `make binaries`", name, binDir)
		}
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return fmt.Errorf("runc is not installed: the lab's containerd runs containers with it (apt-get install runc)")
	}
	return checkFreeSpace()
}

// The suite's use of the disk: the labs' image cache in the bin dir holds
// one preloaded store per set of images, whose identical files the stores
// share (2.3 GiB for the 4 sets of a run, measured on 2026-12-01), and
// while a set's store is made, its archive and its whole store besides
// (3.3 GiB); the machines' disks in the temp dir add up to 3.3 GiB at the
// peak (2026-11-29). Short of space, every lab fails at once.
const (
	imageCacheGiB = 6
	machinesGiB   = 4
)

// checkFreeSpace fails when the disk lacks room for the machines and for
// the part of the image cache not made yet, naming what is short.
func checkFreeSpace() error {
	cache := filepath.Join(binDir, ".lab-images")
	// What the cache takes on disk, as du counts it: each file's blocks,
	// once however many links it has.
	var cached int64
	seen := map[uint64]bool{}
	_ = filepath.WalkDir(cache, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok && !seen[st.Ino] {
				seen[st.Ino] = true
				cached += st.Blocks * 512
			}
		}
		return nil
	})
	// What each filesystem must hold: the two dirs may share one.
	type need struct {
		dir   string
		bytes int64
	}
	needs := map[uint64]*need{}
	for dir, bytes := range map[string]int64{os.TempDir(): machinesGiB << 30, binDir: max(0, imageCacheGiB<<30-cached)} {
		var st syscall.Stat_t
		if err := syscall.Stat(dir, &st); err != nil {
			return fmt.Errorf("free space in %s: %w", dir, err)
		}
		if n := needs[st.Dev]; n != nil {
			n.bytes += bytes
			continue
		}
		needs[st.Dev] = &need{dir, bytes}
	}
	for _, n := range needs {
		var st syscall.Statfs_t
		if err := syscall.Statfs(n.dir, &st); err != nil {
			return fmt.Errorf("free space in %s: %w", n.dir, err)
		}
		// Bavail leaves out root's reserve, which the suite cannot count on.
		if free := int64(st.Bavail) * st.Bsize; free < n.bytes {
			return fmt.Errorf("the filesystem of %s has %.1f GiB free, the suite needs %.1f GiB (its machines' disks in %s, and the labs' image cache in %s, which holds %.1f GiB of the %d it may take): free some space, such as old clones and `go clean -cache`",
				n.dir, gib(free), gib(n.bytes), os.TempDir(), cache, gib(cached), imageCacheGiB)
		}
	}
	return nil
}

// gib is bytes in GiB.
func gib(bytes int64) float64 { return float64(bytes) / (1 << 30) }
