package phases

import (
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/config"
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
