package workflow

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/output"
)

// recorder builds phases that append their name to a log when they run.
func recorder(log *[]string, names ...string) Runner[*testData] {
	var r Runner[*testData]
	for _, n := range names {
		r.Phases = append(r.Phases, Phase[*testData]{Name: n, Run: func(context.Context, *testData) error {
			*log = append(*log, n)
			return nil
		}})
	}
	return r
}

// testData is a workflow's data with nothing beyond the Run.
type testData struct{ *Run }

func testState() (*testData, *bytes.Buffer) {
	var out bytes.Buffer
	return &testData{Run: &Run{Report: output.NewReporter(&out, false)}}, &out
}

func TestRunnerOrderAndSkip(t *testing.T) {
	tests := []struct {
		name string
		skip []string
		want []string
	}{
		{"all in order", nil, []string{"a", "b", "c"}},
		{"skip one", []string{"b"}, []string{"a", "c"}},
		{"skip all", []string{"c", "a", "b"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log []string
			s, _ := testState()
			ran, err := recorder(&log, "a", "b", "c").Run(context.Background(), s, tt.skip)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, log); diff != "" {
				t.Errorf("run order (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, ran); diff != "" {
				t.Errorf("reported phases (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunnerUnknownSkipRunsNothing(t *testing.T) {
	var log []string
	s, _ := testState()
	_, err := recorder(&log, "a", "b").Run(context.Background(), s, []string{"x"})
	var usage *exit.UsageError
	if !errors.As(err, &usage) || usage.ExitCode() != 2 || !strings.Contains(err.Error(), `unknown phase "x"`) || !strings.Contains(err.Error(), "a, b") {
		t.Fatalf("want a usage error listing the phases, got %v", err)
	}
	if len(log) != 0 {
		t.Errorf("phases ran despite the bad flag: %v", log)
	}
}

func TestRunnerSinglePhase(t *testing.T) {
	var log []string
	s, _ := testState()
	r := recorder(&log, "a", "b", "c")
	if ran, err := r.RunOne(context.Background(), s, "b"); err != nil || !slices.Equal(ran, []string{"b"}) {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"b"}, log); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := r.RunOne(context.Background(), s, "nope"); err == nil || !strings.Contains(err.Error(), `unknown phase "nope"`) {
		t.Errorf("want unknown phase error, got %v", err)
	}
}

func TestRunnerSubphases(t *testing.T) {
	var log []string
	parts := recorder(&log, "addon/coredns", "addon/kube-proxy").Phases
	r := recorder(&log, "a")
	r.Phases = append(r.Phases, Phase[*testData]{Name: "addon", Subphases: parts})
	if diff := cmp.Diff([]string{"a", "addon", "addon/coredns", "addon/kube-proxy"}, r.Names()); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	tests := []struct {
		name string
		skip []string
		want []string
	}{
		{"all", nil, []string{"a", "addon/coredns", "addon/kube-proxy"}},
		{"skip one part", []string{"addon/coredns"}, []string{"a", "addon/kube-proxy"}},
		{"skip the phase", []string{"addon"}, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log = nil
			s, _ := testState()
			ran, err := r.Run(context.Background(), s, tt.skip)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, log); diff != "" {
				t.Errorf("ran (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, ran); diff != "" {
				t.Errorf("reported (-want +got):\n%s", diff)
			}
		})
	}
	for name, want := range map[string][]string{"addon": {"addon/coredns", "addon/kube-proxy"}, "addon/kube-proxy": {"addon/kube-proxy"}} {
		log = nil
		s, _ := testState()
		if ran, err := r.RunOne(context.Background(), s, name); err != nil || !slices.Equal(ran, want) || !slices.Equal(log, want) {
			t.Errorf("RunOne(%q) = %v, %v, ran %v; want %v", name, ran, err, log, want)
		}
	}
}

func TestRunnerWrapsErrorOnceAndStops(t *testing.T) {
	cause := errors.New("disk full")
	var log []string
	r := recorder(&log, "a")
	r.Phases = append(r.Phases, Phase[*testData]{Name: "b", Run: func(context.Context, *testData) error { return cause }})
	r.Phases = append(r.Phases, recorder(&log, "c").Phases...)
	s, _ := testState()
	ran, err := r.Run(context.Background(), s, nil)
	if !errors.Is(err, cause) || err.Error() != "phase b: disk full" {
		t.Fatalf("got %v, want %q wrapping the cause", err, "phase b: disk full")
	}
	if diff := cmp.Diff([]string{"a"}, log); diff != "" {
		t.Errorf("phases after the failure ran (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a"}, ran); diff != "" {
		t.Errorf("reported phases (-want +got):\n%s", diff)
	}
}

func TestRunnerDryRunSkipsLiveOnly(t *testing.T) {
	var log []string
	r := recorder(&log, "a", "wait")
	r.Phases[1].LiveOnly = true
	s, out := testState()
	s.Options.DryRun = true
	ran, err := r.Run(context.Background(), s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a"}, log); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a"}, ran); diff != "" {
		t.Errorf("a skipped phase is reported as run (-want +got):\n%s", diff)
	}
	if !strings.Contains(out.String(), "[wait] skipped in a dry run") {
		t.Errorf("no skip message in %q", out.String())
	}
}

func TestRunnerPrefixesProgress(t *testing.T) {
	s, out := testState()
	r := Runner[*testData]{Phases: []Phase[*testData]{{Name: "certs", Run: func(_ context.Context, s *testData) error {
		s.Report.Infof("generated %d certificates", 3)
		s.Report.Warnf("slow disk")
		return nil
	}}}}
	if _, err := r.Run(context.Background(), s, nil); err != nil {
		t.Fatal(err)
	}
	want := "[certs] generated 3 certificates\n[certs] WARNING: slow disk\n"
	if out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}

// TestNestedRunRestoresThePhase: an operation that runs phases of its own
// (upgrade apply runs init's file phases first) reports under its own name
// again once they are done.
func TestNestedRunRestoresThePhase(t *testing.T) {
	var out bytes.Buffer
	s := &testData{Run: &Run{Report: output.NewReporter(&out, false)}}
	op := Operation[*testData]{Name: "upgrade", Run: func(ctx context.Context, s *testData) error {
		if _, err := recorder(&[]string{}, "certs").Run(ctx, s, nil); err != nil {
			return err
		}
		s.Report.Infof("after the nested run")
		return nil
	}}
	if _, err := op.Execute(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "[upgrade] after the nested run") {
		t.Errorf("the operation's own line lost its phase:\n%s", out.String())
	}
}

// TestHostSystemVersionAsksEachFileOnce checks that the host's Version
// starts a binary once per file: a second question about the same file is
// answered from the first, and a new file installed at the path (a
// package's upgrade renames one into place) is asked again.
func TestHostSystemVersionAsksEachFileOnce(t *testing.T) {
	dir := t.TempDir()
	calls, binary := filepath.Join(dir, "calls"), filepath.Join(dir, "kubelet")
	install := func(release string) {
		t.Helper()
		script := fmt.Sprintf("#!/bin/sh\necho started >> %s\necho Kubernetes %s\n", calls, release)
		next := binary + ".new"
		if err := os.WriteFile(next, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(next, binary); err != nil {
			t.Fatal(err)
		}
	}
	sys := HostSystem("test")
	check := func(want string, wantCalls int) {
		t.Helper()
		out, err := sys.Version(t.Context(), binary)
		if err != nil || out != "Kubernetes "+want+"\n" {
			t.Fatalf("Version = %q, %v; want Kubernetes %s", out, err, want)
		}
		log, err := os.ReadFile(calls)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(string(log), "started"); got != wantCalls {
			t.Fatalf("the binary ran %d times, want %d", got, wantCalls)
		}
	}
	install("v1.35.4")
	check("v1.35.4", 1)
	check("v1.35.4", 1)
	install("v1.36.3")
	check("v1.36.3", 2)
	check("v1.36.3", 2)
}
