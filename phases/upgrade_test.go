package phases

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/health"
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

// A crash while a manifest was out of the manifest dir, or in but not
// verified, leaves a journal; the next run puts the previous manifest back
// and forgets the journal, so its pass replaces the component again.
func TestResumeUpgrade(t *testing.T) {
	for _, tt := range []struct {
		name     string
		leftOver func(path string) error
	}{
		{"manifest out", os.Remove},
		{"new manifest in", func(path string) error { return os.WriteFile(path, []byte("new"), 0o600) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := initialised(t)
			path := s.Config.ManifestPath(config.NameAPIServer)
			prev, err := s.Files.ReadFile(path)
			must(t, err)
			backup, err := backupManifest(s, config.NameAPIServer, prev)
			must(t, err)
			must(t, writeJournal(s, journal{Component: config.NameAPIServer, Backup: backup}))
			must(t, tt.leftOver(s.Files.HostPath(path)))

			must(t, resumeUpgrade(s))
			if got, _ := s.Files.ReadFile(path); string(got) != string(prev) {
				t.Error("the previous manifest is not back")
			}
			if _, err := s.Files.ReadFile(journalPath(s.Config)); err == nil {
				t.Error("the journal is still there")
			}
		})
	}
}

func TestUpgradeOne(t *testing.T) {
	for _, tt := range []struct {
		name    string
		edit    string
		wantErr string
	}{
		{name: "healthy new instance", edit: "# a change\n"},
		{name: "failing new instance is rolled back", edit: "# --bogus-flag\n", wantErr: "rolled back"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := initialised(t)
			s.Options.Offline = false
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			must(t, err)
			addr := ln.Addr().String()
			_ = ln.Close()
			host, port, _ := net.SplitHostPort(addr)
			ctx, cancel := context.WithCancel(context.Background())
			k := &fakeKubelet{}
			done := make(chan struct{})
			go func() { k.run(ctx, t, s, addr, false); close(done) }()
			defer func() { cancel(); <-done }()
			for k.started() == 0 {
				time.Sleep(10 * time.Millisecond)
			}

			path := s.Config.ManifestPath(config.NameScheduler)
			prev, err := s.Files.ReadFile(path)
			must(t, err)
			next := append(append([]byte{}, prev...), tt.edit...)
			target := health.Target{Component: config.NameScheduler, Endpoints: []string{"https://" + addr}, Paths: []string{"/livez"},
				CAFile: s.Config.CertPath(config.CertCA), ServerCertFile: s.Config.CertPath(config.CertScheduler)}
			l := []listener{{config.NameScheduler, host, port}}
			err = upgradeOne(ctx, s, 2*time.Second, instance{data: prev, target: target}, instance{data: next, target: target}, l, l)

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
			if k.started() != 2 {
				t.Errorf("the component started %d times, want 2 (before, and the upgraded or rolled-back instance)", k.started())
			}
			if _, err := s.Files.ReadFile(journalPath(s.Config)); err == nil {
				t.Error("the journal outlived the step")
			}
		})
	}
}
