package hostile

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// kubeboot is the binary TestMain builds.
var kubeboot string

// memoryLimit caps the address space of each run, so that an unbounded
// read fails in the run instead of exhausting the machine.
const memoryLimit = 2 << 30

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

// runSuite builds kubeboot once and runs the table. A missing
// prerequisite fails the suite; it never skips.
func runSuite(m *testing.M) int {
	for _, tool := range []string{"go", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			fmt.Fprintf(os.Stderr, "hostile: %s is needed: %v\n", tool, err)
			return 1
		}
	}
	tmp, err := os.MkdirTemp("", "kb-hostile-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "hostile: %v\n", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	kubeboot = filepath.Join(tmp, "kubeboot")
	build := exec.Command("go", "build", "-o", kubeboot, "github.com/kubeboot/kubeboot/cmd/kubeboot")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "hostile: build kubeboot: %v\n", err)
		return 1
	}
	return m.Run()
}

// result is how one run of kubeboot ended.
type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// command is kubeboot with args, under the memory limit, in dir; it is
// killed after a minute.
func command(ctx context.Context, dir string, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	script := fmt.Sprintf(`ulimit -v %d && exec "$0" "$@"`, memoryLimit>>10)
	cmd := exec.CommandContext(ctx, "sh", append([]string{"-c", script, kubeboot}, args...)...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	return cmd, &stdout, &stderr
}

// run runs kubeboot to its end.
func run(t *testing.T, dir string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd, stdout, stderr := command(ctx, dir, args...)
	start := time.Now()
	err := cmd.Run()
	return finish(t, cmd, err, stdout, stderr, time.Since(start))
}

// finish turns the end of a run into a result.
func finish(t *testing.T, cmd *exec.Cmd, err error, stdout, stderr *bytes.Buffer, took time.Duration) result {
	t.Helper()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("run %v: %v", cmd.Args, err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String(), took: took}
}

// tree records every path under dir: its type, permission bits (with
// setuid, setgid and sticky) and content hash, or a symlink's target.
// Directory times are left out: creating and removing a file changes them.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		state := fmt.Sprintf("%v", info.Mode())
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			state += " -> " + target
		case info.Mode().IsRegular():
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			state += fmt.Sprintf(" %x", sha256.Sum256(data))
		}
		out[strings.TrimPrefix(path, dir)] = state
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// changed lists the paths whose state differs between two trees, except
// those under one of the allowed prefixes.
func changed(before, after map[string]string, allowed []string) []string {
	var out []string
	check := func(path string) {
		for _, prefix := range allowed {
			if path == prefix || strings.HasPrefix(path, prefix+"/") {
				return
			}
		}
		if before[path] != after[path] {
			out = append(out, fmt.Sprintf("%s: %q -> %q", path, before[path], after[path]))
		}
	}
	for path := range before {
		check(path)
	}
	for path := range after {
		if _, ok := before[path]; !ok {
			check(path)
		}
	}
	sort.Strings(out)
	return out
}

// mode returns the mode of path, with the sticky bit.
func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode()
}

// mkfifo makes a named pipe nobody writes to, creating its directory.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
}

// writeFile writes a file, creating its directory.
func writeFile(t *testing.T, path, text string, perm fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), perm); err != nil {
		t.Fatal(err)
	}
}
