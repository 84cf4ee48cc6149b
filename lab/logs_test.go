package lab_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// record is one parsed CRI log line.
type record struct {
	time    time.Time
	stream  string
	partial bool
	content string
}

var recordRE = regexp.MustCompile(`^(\S+) (stdout|stderr) (F|P) (.*)$`)

// parseLog parses a CRI log file, failing on any malformed line.
func parseLog(t *testing.T, log string) []record {
	t.Helper()
	var records []record
	for _, line := range strings.SplitAfter(log, "\n") {
		if line == "" {
			continue
		}
		if !strings.HasSuffix(line, "\n") {
			t.Fatalf("log line %q does not end with a newline", line)
		}
		m := recordRE.FindStringSubmatch(strings.TrimSuffix(line, "\n"))
		if m == nil {
			t.Fatalf("log line %q is not in the CRI format", line)
		}
		ts, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		records = append(records, record{time: ts, stream: m[2], partial: m[3] == "P", content: m[4]})
	}
	return records
}

// lines joins partial records into lines, per stream.
func lines(records []record, stream string) []string {
	var out []string
	var cur strings.Builder
	for _, r := range records {
		if r.stream != stream {
			continue
		}
		cur.WriteString(r.content)
		if !r.partial {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	return out
}

// containsLine reports whether a CRI log has a full line equal to want.
func containsLine(log, want string) bool {
	for _, line := range strings.Split(log, "\n") {
		if m := recordRE.FindStringSubmatch(line); m != nil && m[3] == "F" && m[4] == want {
			return true
		}
	}
	return false
}

func TestLogFormat(t *testing.T) {
	e := newEnv(t)
	sb, _ := e.runSandbox("pod")
	script := `echo out1; echo err1 >&2; echo; echo "  spaced  out  "; echo err2 >&2;
head -c 40000 /dev/zero | tr '\0' a; echo; printf 'no newline'`
	start := time.Now()
	st := e.waitExited(e.run(sb, shConfig("talker", script)))
	if _, err := os.Stat(st.LogPath); err != nil {
		t.Fatalf("the log dir and file were not created: %v", err)
	}
	records := parseLog(t, readLog(t, st.LogPath))
	for _, r := range records {
		if r.time.Before(start.Add(-time.Second)) || r.time.After(time.Now()) {
			t.Errorf("record %q has timestamp %s outside the run", r.content, r.time)
		}
	}
	wantOut := []string{"out1", "", "  spaced  out  ", strings.Repeat("a", 40000), "no newline"}
	if got := lines(records, "stdout"); !equalStrings(got, wantOut) {
		t.Errorf("stdout lines = %.80q, want %.80q", got, wantOut)
	}
	if got := lines(records, "stderr"); !equalStrings(got, []string{"err1", "err2"}) {
		t.Errorf("stderr lines = %q", got)
	}
	// A 40000-byte line is split into 16 KiB records, as containerd does.
	var partials int
	for _, r := range records {
		if r.partial {
			partials++
			if len(r.content) != 16*1024 {
				t.Errorf("partial record of %d bytes, want 16 KiB", len(r.content))
			}
		}
	}
	if partials != 2 {
		t.Errorf("%d partial records, want 2", partials)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestReopenContainerLog(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb, _ := e.runSandbox("pod")
	id := e.run(sb, shConfig("ticker", "while :; do echo tick; sleep 0.02; done"))
	path := e.status(id).LogPath
	eventually(t, 5*time.Second, "the first tick is logged", func() bool { return containsLine(readLog(t, path), "tick") })

	// The kubelet rotates a log by renaming it and asking for a reopen.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rs.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "ticks go to the new file", func() bool { return containsLine(readLog(t, path), "tick") })
	rotated := readLog(t, path+".1")
	time.Sleep(100 * time.Millisecond)
	if again := readLog(t, path+".1"); again != rotated {
		t.Errorf("the rotated file still grows")
	}
	parseLog(t, rotated)

	if _, err := e.rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	_, err := e.rs.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: id})
	wantCode(t, err, codes.FailedPrecondition, "not running")
}

func TestExecSync(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb, _ := e.runSandbox("pod")
	cfg := shConfig("main", "exec sleep 30")
	cfg.WorkingDir = e.dir
	cfg.Envs = []*runtimeapi.KeyValue{{Key: "FOO", Value: []byte("bar")}}
	id := e.run(sb, cfg)

	resp, err := e.rs.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"sh", "-c", `echo "$FOO $(pwd)"; echo oops >&2; exit 4`}, Timeout: 5})
	if err != nil {
		t.Fatal(err)
	}
	if resp.ExitCode != 4 || string(resp.Stdout) != "bar "+e.dir+"\n" || string(resp.Stderr) != "oops\n" {
		t.Errorf("ExecSync = exit %d stdout %q stderr %q; want 4, the container's env and working dir, and oops", resp.ExitCode, resp.Stdout, resp.Stderr)
	}

	start := time.Now()
	_, err = e.rs.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"sleep", "10"}, Timeout: 1})
	wantCode(t, err, codes.DeadlineExceeded, "timed out")
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("a timed-out ExecSync took %s", d)
	}

	_, err = e.rs.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"no-such-command-kubeboot"}})
	wantCode(t, err, codes.InvalidArgument, "no-such-command-kubeboot")
	_, err = e.rs.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: "nope", Cmd: []string{"true"}})
	wantCode(t, err, codes.NotFound)
	stopped := e.waitExited(e.run(sb, shConfig("done", "true")))
	_, err = e.rs.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: stopped.Id, Cmd: []string{"true"}})
	wantCode(t, err, codes.FailedPrecondition, "not running")
}
