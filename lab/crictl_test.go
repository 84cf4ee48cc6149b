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

// crictlPath is where test/tools/build.sh puts crictl, seen from this
// package's directory.
const crictlPath = "../.cache/bin/crictl"

// TestCrictl checks the runtime through the real crictl, the CRI client
// people will point at it.
func TestCrictl(t *testing.T) {
	bin, err := filepath.Abs(crictlPath)
	if err == nil {
		bin, err = exec.LookPath(bin)
	}
	if err != nil {
		if bin, err = exec.LookPath("crictl"); err != nil {
			t.Skipf("crictl not found at %s or in PATH; build it with test/tools/build.sh", crictlPath)
		}
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
