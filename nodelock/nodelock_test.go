package nodelock

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestMain lets the test binary act as a lock holder in a child process:
// with NODELOCK_HOLD set it takes that lock, says so, and waits to be killed.
func TestMain(m *testing.M) {
	if path := os.Getenv("NODELOCK_HOLD"); path != "" {
		if _, err := Acquire(path, "kubeboot init --holder"); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println("locked")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestAcquireReleaseAcquire(t *testing.T) {
	path := filepath.Join(t.TempDir(), Path("/etc/kubernetes"))
	first, err := Acquire(path, "kubeboot  init\n--root /x")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(path, "kubeboot reset")
	var held *HeldError
	if !errors.As(err, &held) {
		t.Fatalf("second Acquire: got %v, want a *HeldError", err)
	}
	want := &HeldError{Path: path, PID: os.Getpid(), Command: "kubeboot init --root /x"}
	if diff := cmp.Diff(want, held); diff != "" {
		t.Errorf("holder (-want +got):\n%s", diff)
	}
	prefix := fmt.Sprintf("another kubeboot (pid %d, kubeboot init --root /x) is changing this node", os.Getpid())
	if !strings.HasPrefix(err.Error(), prefix) {
		t.Errorf("message %q, want it to start with %q", err, prefix)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	again, err := Acquire(path, "kubeboot reset")
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	data, err := os.ReadFile(path)
	if err != nil || string(data) != strconv.Itoa(os.Getpid())+"\nkubeboot reset\n" {
		t.Errorf("lock file holds %q (%v), want the holder's pid and command", data, err)
	}
	if err := again.Release(); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseLeavesNothingItMade: a run refused before it wrote anything
// leaves no lock file and no directory behind, while a directory that was
// there before, or that the run wrote into, stays.
func TestReleaseLeavesNothingItMade(t *testing.T) {
	root := t.TempDir()
	lock, err := Acquire(filepath.Join(root, Path("/etc/kubernetes")), "kubeboot init")
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("left %v in the root", entries)
	}
	lock, err = Acquire(filepath.Join(root, Path("/etc/kubernetes")), "kubeboot init")
	if err != nil {
		t.Fatal(err)
	}
	written := filepath.Join(root, "/etc/kubernetes/admin.conf")
	if err := os.WriteFile(written, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(written); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Dir(filepath.Join(root, Path("/etc/kubernetes")))); !os.IsNotExist(err) {
		t.Errorf("the empty lock directory stays: %v", err)
	}
}

func TestKilledHolderReleases(t *testing.T) {
	path := filepath.Join(t.TempDir(), Path("/etc/kubernetes"))
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), "NODELOCK_HOLD="+path)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "locked\n" {
		t.Fatalf("holder said %q", line)
	}
	_, err = Acquire(path, "kubeboot init")
	var held *HeldError
	if !errors.As(err, &held) || held.PID != child.Process.Pid || held.Command != "kubeboot init --holder" {
		t.Fatalf("while the child holds the lock: got %v, want pid %d", err, child.Process.Pid)
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	lock, err := Acquire(path, "kubeboot init")
	if err != nil {
		t.Fatalf("after SIGKILL of the holder: %v", err)
	}
	if err := lock.Release(); err != nil {
		t.Fatal(err)
	}
}

func TestAcquireRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, Path("/etc/kubernetes"))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(path, "kubeboot init"); err == nil {
		t.Fatal("Acquire followed a symlink")
	}
	if data, _ := os.ReadFile(target); string(data) != "keep" {
		t.Errorf("the symlink's target was written: %q", data)
	}
}

// TestOneHolderAtATime races acquirers against releasers, who remove the
// file: at no time may two of them hold the lock.
func TestOneHolderAtATime(t *testing.T) {
	path := filepath.Join(t.TempDir(), Path("/etc/kubernetes"))
	var holders, maxHolders atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				lock, err := Acquire(path, "kubeboot init")
				var held *HeldError
				if errors.As(err, &held) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				n := holders.Add(1)
				if n > maxHolders.Load() {
					maxHolders.Store(n)
				}
				holders.Add(-1)
				if err := lock.Release(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if maxHolders.Load() > 1 {
		t.Errorf("%d processes held the lock at once", maxHolders.Load())
	}
}

// TestReleaseRemovesKubebootsEmptyDir: after a reset, the lock is all that
// kubeboot's directory holds; releasing it leaves no empty directory.
func TestReleaseRemovesKubebootsEmptyDir(t *testing.T) {
	path := filepath.Join(t.TempDir(), Path("/etc/kubernetes"))
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := Acquire(path, "kubeboot reset")
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
		t.Errorf("kubeboot's empty directory stays after the release: %v", err)
	}
}
