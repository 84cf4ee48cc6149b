package lab_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/lab"
)

// syncBuffer is a log that the supervisor writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSuperviseRestarts: a daemon that exits is started again, each exit
// logged; ending the context ends the supervision.
func TestSuperviseRestarts(t *testing.T) {
	runs := filepath.Join(t.TempDir(), "runs")
	ctx, cancel := context.WithCancel(context.Background())
	var log syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- lab.Supervise(ctx, &log, 10*time.Millisecond, nil, "/bin/sh", "-c", "echo run >> "+runs+"; exit 3")
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if data, _ := os.ReadFile(runs); strings.Count(string(data), "run") >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not run three times; log:\n%s", log.String())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "/bin/sh exited (exit status 3); restarting it in") {
		t.Errorf("the exits are not logged:\n%s", log.String())
	}
}

// TestSuperviseStops: ending the context stops a daemon that runs, with
// SIGTERM, and the supervision returns without restarting it.
func TestSuperviseStops(t *testing.T) {
	dir := t.TempDir()
	ready, marker := filepath.Join(dir, "ready"), filepath.Join(dir, "terminated")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var log syncBuffer
	go func() {
		done <- lab.Supervise(ctx, &log, time.Second, nil, "/bin/sh", "-c", "trap 'touch "+marker+"; exit 0' TERM; touch "+ready+"; while :; do sleep 0.05; done")
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not start")
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Supervise did not return after its context ended")
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the daemon got no SIGTERM: %v", err)
	}
	if got := log.String(); !strings.HasPrefix(got, "supervisor: stopped /bin/sh") || strings.Contains(got, "restarting") {
		t.Errorf("the stop is not logged as a stop: %q", got)
	}
}
