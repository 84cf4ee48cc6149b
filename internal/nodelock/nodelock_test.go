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
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/internal/exit"
)

// TestMain lets the test binary act as a lock holder in a child process:
// with NODELOCK_HOLD set it takes that lock, says so, and waits to be killed.
func TestMain(m *testing.M) {
	if path := os.Getenv("NODELOCK_HOLD"); path != "" {
		if _, err := Acquire("", path, "kubeboot init --holder"); err != nil {
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
	path := filepath.Join(t.TempDir(), File)
	first, err := Acquire("", path, "kubeboot  init\n--root /x")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire("", path, "kubeboot reset")
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
	again, err := Acquire("", path, "kubeboot reset")
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
	lock, err := Acquire("", filepath.Join(root, File), "kubeboot init")
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("left %v in the root", entries)
	}
	lock, err = Acquire("", filepath.Join(root, File), "kubeboot init")
	if err != nil {
		t.Fatal(err)
	}
	written := filepath.Join(root, "/run/other.pid")
	if err := os.WriteFile(written, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(written); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Dir(filepath.Join(root, File))); !os.IsNotExist(err) {
		t.Errorf("the empty lock directory stays: %v", err)
	}
}

func TestKilledHolderReleases(t *testing.T) {
	path := filepath.Join(t.TempDir(), File)
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
	_, err = Acquire("", path, "kubeboot init")
	var held *HeldError
	if !errors.As(err, &held) || held.PID != child.Process.Pid || held.Command != "kubeboot init --holder" {
		t.Fatalf("while the child holds the lock: got %v, want pid %d", err, child.Process.Pid)
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	lock, err := Acquire("", path, "kubeboot init")
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
	path := filepath.Join(dir, File)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire("", path, "kubeboot init"); err == nil {
		t.Fatal("Acquire followed a symlink")
	}
	if data, _ := os.ReadFile(target); string(data) != "keep" {
		t.Errorf("the symlink's target was written: %q", data)
	}
}

// TestOneHolderAtATime races acquirers against releasers, who remove the
// file: at no time may two of them hold the lock.
func TestOneHolderAtATime(t *testing.T) {
	path := filepath.Join(t.TempDir(), File)
	var holders, maxHolders atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				lock, err := Acquire("", path, "kubeboot init")
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
	path := filepath.Join(t.TempDir(), File)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := Acquire("", path, "kubeboot reset")
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

// TestLockIsTheNodes: two runs under one root take the same lock at File,
// whatever their configurations say.
func TestLockIsTheNodes(t *testing.T) {
	root := t.TempDir()
	first, err := Acquire(root, File, "kubeboot init")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "run/kubeboot/lock")); err != nil {
		t.Errorf("no lock at <root>/run/kubeboot/lock: %v", err)
	}
	var held *HeldError
	if _, err := Acquire(root, File, "kubeboot init"); !errors.As(err, &held) {
		t.Errorf("a second run under the same root: got %v, want a *HeldError", err)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("left %v in the root", entries)
	}
}

// TestAcquireNeverWritesAnotherFile: a hard link, a symlink, a FIFO or a
// directory at the lock's path, or a symlink on its way that leads out of
// the root, never makes Acquire write or create anything outside the
// root, nor open a FIFO; what is not kubeboot's lock file is refused with
// exit 2.
func TestAcquireNeverWritesAnotherFile(t *testing.T) {
	tests := []struct {
		name string
		// plant prepares the root; outside is a file outside it.
		plant func(t *testing.T, root, outside string)
		// refused is a part of the refusal; empty means the lock is taken
		// inside the root.
		refused string
	}{
		{"hard link", func(t *testing.T, root, outside string) {
			must(t, os.MkdirAll(filepath.Join(root, "run/kubeboot"), 0o755))
			must(t, os.Link(outside, filepath.Join(root, File)))
		}, "it has 2 hard links"},
		{"symlink", func(t *testing.T, root, outside string) {
			must(t, os.MkdirAll(filepath.Join(root, "run/kubeboot"), 0o755))
			must(t, os.Symlink(outside, filepath.Join(root, File)))
		}, "not a regular file"},
		{"fifo", func(t *testing.T, root, _ string) {
			must(t, os.MkdirAll(filepath.Join(root, "run/kubeboot"), 0o755))
			must(t, syscall.Mkfifo(filepath.Join(root, File), 0o600))
		}, "not a regular file"},
		{"directory", func(t *testing.T, root, _ string) {
			must(t, os.MkdirAll(filepath.Join(root, File), 0o755))
		}, "not a regular file"},
		{"symlinked parent", func(t *testing.T, root, outside string) {
			must(t, os.Symlink(filepath.Dir(outside), filepath.Join(root, "run")))
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, away := t.TempDir(), t.TempDir()
			outside := filepath.Join(away, "lock")
			must(t, os.WriteFile(outside, []byte("keep"), 0o600))
			tt.plant(t, root, outside)
			lock, err := Acquire(root, File, "kubeboot init")
			if tt.refused == "" && err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			if tt.refused != "" && (err == nil || !strings.Contains(err.Error(), tt.refused) || exit.Code(err) != exit.Usage) {
				t.Errorf("got %v (exit %d), want a usage error saying %q", err, exit.Code(err), tt.refused)
			}
			if lock != nil {
				if _, err := os.Stat(filepath.Join(root, filepath.Dir(outside), "kubeboot/lock")); err != nil {
					t.Errorf("the lock is not inside the root, where the symlink leads there: %v", err)
				}
				must(t, lock.Release())
			}
			if data, err := os.ReadFile(outside); err != nil || string(data) != "keep" {
				t.Errorf("the file outside the root was written: %q, %v", data, err)
			}
			if entries, _ := os.ReadDir(away); len(entries) != 1 {
				t.Errorf("created outside the root: %v", entries)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
