package lab_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// crictlBinary finds the crictl that test/tools/build.sh builds: in
// $KUBEBOOT_BIN_DIR, else in test/tools/bin (where `make binaries` puts it),
// else in PATH. Under CI a missing crictl fails the test: CI builds it
// before the unit tests run.
func crictlBinary(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("KUBEBOOT_BIN_DIR")
	if dir == "" {
		dir = filepath.Join("..", "test", "tools", "bin")
	}
	if bin, err := exec.LookPath(filepath.Join(dir, "crictl")); err == nil {
		return bin
	}
	if bin, err := exec.LookPath("crictl"); err == nil {
		return bin
	}
	msg := "crictl not found in " + dir + " or in PATH; build it with `make binaries`"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// TestCrictl checks the runtime through the real crictl, the CRI client
// people will point at it.
func TestCrictl(t *testing.T) {
	bin, err := filepath.Abs(crictlBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	sb, _ := e.runSandbox("pod")
	talker := e.run(sb, shConfig("talker", "echo hello from stdout; echo hello from stderr >&2; exit 3"))
	runner := e.run(sb, shConfig("runner", "exec sleep 30"))
	e.waitExited(talker)

	// Our own config keeps the host's /etc/crictl.yaml out.
	config := filepath.Join(e.dir, "crictl.yaml")
	endpoint := "unix://" + e.sock
	configText := "runtime-endpoint: " + endpoint + "\nimage-endpoint: " + endpoint + "\ntimeout: 10\n"
	if err := os.WriteFile(config, []byte(configText), 0o644); err != nil {
		t.Fatal(err)
	}
	crictl := func(args ...string) (string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"--config", config}, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("crictl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, &stdout, &stderr)
		}
		return stdout.String(), stderr.String()
	}

	ps, _ := crictl("ps", "-a")
	for id, want := range map[string][]string{
		talker: {"Exited", "talker", sb[:13], "registry.k8s.io/sh:1"},
		runner: {"Running", "runner", sb[:13]},
	} {
		var row string
		for _, line := range strings.Split(ps, "\n") {
			if strings.HasPrefix(line, id[:13]) {
				row = line
			}
		}
		for _, w := range want {
			if !strings.Contains(row, w) {
				t.Errorf("crictl ps -a row for %.13s is %q, want it to contain %q; output:\n%s", id, row, w, ps)
			}
		}
	}

	stdout, stderr := crictl("logs", talker)
	if stdout != "hello from stdout\n" || !strings.Contains(stderr, "hello from stderr\n") {
		t.Errorf("crictl logs: stdout %q stderr %q", stdout, stderr)
	}

	out, _ := crictl("inspect", talker)
	var inspect struct {
		Status struct {
			ID       string
			State    string
			ExitCode int
			Reason   string
			LogPath  string
		}
		Info struct{ PID int }
	}
	if err := json.Unmarshal([]byte(out), &inspect); err != nil {
		t.Fatalf("crictl inspect output is not JSON: %v\n%s", err, out)
	}
	st := inspect.Status
	if st.ID != talker || st.State != "CONTAINER_EXITED" || st.ExitCode != 3 || st.Reason != "Error" ||
		st.LogPath != e.status(talker).LogPath || inspect.Info.PID == 0 {
		t.Errorf("crictl inspect = %+v, want exited talker with exit code 3 and its pid; output:\n%s", inspect, out)
	}
}
