package phases

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/procnet"
)

func TestCheckSkew(t *testing.T) {
	pod := func(image string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Image: image}}}}
	}
	tests := []struct {
		from, to string
		wantErr  string
	}{
		{"registry.k8s.io/kube-apiserver:v1.35.4", "v1.36.3", ""},
		{"registry.k8s.io/kube-apiserver:v1.36.0", "v1.36.3", ""},
		{"localhost:5000/kube-apiserver:v1.36.3", "v1.36.1", ""},
		{"registry.k8s.io/kube-apiserver:v1.34.1", "v1.36.3", "one minor version at a time (to v1.35 first)"},
		{"registry.k8s.io/kube-apiserver:v1.36.3", "v1.35.4", "downgrades across minor versions"},
		{"registry.k8s.io/kube-apiserver:latest", "v1.36.3", "read the running version"},
	}
	for _, tt := range tests {
		err := checkSkew(pod(tt.from), tt.to)
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%s -> %s: got %v, want %q", tt.from, tt.to, err, tt.wantErr)
		}
	}
}

func TestUpgradeOne(t *testing.T) {
	for _, tt := range []struct {
		name          string
		edit          string
		ignoreChanges bool
		wantErr       string
		wantStarts    int
	}{
		{name: "healthy new instance", edit: "# a change\n", wantStarts: 2},
		{name: "failing new instance is rolled back", edit: "# --bogus-flag\n", wantErr: "rolled back", wantStarts: 2},
		{name: "old instance that keeps answering is no success", edit: "# a change\n", ignoreChanges: true,
			wantErr: "has not started one from the new manifest", wantStarts: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := initialised(t)
			s.Options.Offline = false
			k := &fakeKubelet{addr: freeAddr(t), ignoreChanges: tt.ignoreChanges}
			k.start(t, s)
			path := s.Config.ManifestPath(config.NameScheduler)
			prev, err := s.Files.ReadFile(path)
			must(t, err)
			next := append(append([]byte{}, prev...), tt.edit...)
			target := schedulerTarget(s, k.addr)
			manifests := watchManifest(t, s.Files.HostPath(path))

			err = upgradeOne(context.Background(), s, 2*time.Second, instance{data: prev, target: target}, instance{data: next, target: target})

			want := next
			if tt.wantErr != "" {
				want = prev
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("want an error with %q, got %v", tt.wantErr, err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got, _ := s.Files.ReadFile(path); string(got) != string(want) {
				t.Errorf("manifest after the upgrade:\n%s\nwant:\n%s", got, want)
			}
			if k.started() != tt.wantStarts {
				t.Errorf("the component started %d times, want %d", k.started(), tt.wantStarts)
			}
			if missing := manifests(); missing > 0 {
				t.Errorf("the manifest was missing %d times during the upgrade", missing)
			}
			if _, err := s.Files.ReadFile(journalPath(s.Config)); tt.wantErr == "rolled back" && err == nil {
				t.Error("the journal outlived a verified rollback")
			}
		})
	}
}

// watchManifest polls path until the test ends; the returned function
// says how many polls found it missing.
func watchManifest(t *testing.T, path string) func() int {
	var missing atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if _, err := os.Stat(path); err != nil {
				missing.Add(1)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	stop := func() int { cancel(); <-done; return int(missing.Load()) }
	t.Cleanup(func() { stop() })
	return stop
}

// A crash in a step leaves a journal. When the crash came before the new
// manifest was written, the re-run just forgets it; after, the re-run
// finishes the step: a healthy new instance ends it, a failing one is
// rolled back, verified.
func TestResumeUpgrade(t *testing.T) {
	for _, tt := range []struct {
		name      string
		written   string // what the crash left in the manifest dir; "" = the previous manifest
		wantErr   string
		wantPrev  bool
		wantStart int
	}{
		{name: "crash before the write", wantPrev: true, wantStart: 1},
		{name: "crash after the write", written: "# a change\n", wantStart: 2},
		{name: "crash after writing a failing manifest", written: "# --bogus-flag\n", wantErr: "rolled back", wantPrev: true, wantStart: 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := initialised(t)
			s.Options.Offline = false
			// The stand-in scheduler is checked where the manifest says.
			k := &fakeKubelet{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(config.PortScheduler))}
			if conn, err := net.Dial("tcp", k.addr); err == nil {
				_ = conn.Close()
				t.Fatalf("%s is taken: this test runs the stand-in scheduler there", k.addr)
			}
			path := s.Config.ManifestPath(config.NameScheduler)
			prev, err := s.Files.ReadFile(path)
			must(t, err)
			backup, err := backupManifest(s, config.NameScheduler, prev)
			must(t, err)
			k.start(t, s)
			must(t, writeJournal(s, journal{Component: config.NameScheduler, Backup: backup, Started: time.Now()}))
			if tt.written != "" {
				must(t, s.Files.WriteFile(path, append(append([]byte{}, prev...), tt.written...), manifestMode))
			}

			err = resumeUpgrade(context.Background(), s, 5*time.Second)

			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("got %v, want an error with %q", err, tt.wantErr)
			}
			if got, _ := s.Files.ReadFile(path); (string(got) == string(prev)) != tt.wantPrev {
				t.Errorf("previous manifest in place: %v, want %v", !tt.wantPrev, tt.wantPrev)
			}
			if k.started() != tt.wantStart {
				t.Errorf("the component started %d times, want %d", k.started(), tt.wantStart)
			}
			if _, err := s.Files.ReadFile(journalPath(s.Config)); err == nil {
				t.Error("the journal is still there")
			}
		})
	}
}

// The upgrade tells instances apart by the process behind the checked
// address; preflight refuses when it cannot see that process.
func TestInstanceOf(t *testing.T) {
	s := initialised(t)
	addr := freeAddr(t)
	target := schedulerTarget(s, addr)
	if _, err := instanceOf(target); !errors.Is(err, procnet.ErrNotListening) {
		t.Errorf("nothing on %s: got %v, want ErrNotListening", addr, err)
	}
	pods, _, err := manifestPods(s)
	must(t, err)
	if err := checkInstancesVisible(s, pods); err == nil || !strings.Contains(err.Error(), "cannot tell the etcd instances apart") {
		t.Errorf("preflight with no component running: %v", err)
	}

	cmd := startComponent(t, s, addr)
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		p, err := instanceOf(target)
		if err == nil {
			if p.PID != cmd.Process.Pid {
				t.Errorf("instance %s, want the stand-in's pid %d", p, cmd.Process.Pid)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
}
