package lab

import (
	"os"
	"path/filepath"
	"testing"
)

func TestBinaryName(t *testing.T) {
	for ref, want := range map[string]string{
		"registry.k8s.io/kube-apiserver:v1.36.3":   "kube-apiserver",
		"registry.k8s.io/etcd:3.6.8-0":             "etcd",
		"registry.k8s.io/pause:3.10":               "pause",
		"localhost:5000/team/kube-scheduler":       "kube-scheduler",
		"etcd@sha256:0123456789abcdef":             "etcd",
		"registry.k8s.io/etcd:3.6.8-0@sha256:0123": "etcd",
		"busybox": "busybox",
	} {
		got, err := binaryName(ref)
		if err != nil || got != want {
			t.Errorf("binaryName(%q) = %q, %v; want %q", ref, got, err, want)
		}
	}
	for _, ref := range []string{"", "registry.k8s.io/", "x/..", "x/:tag"} {
		if got, err := binaryName(ref); err == nil {
			t.Errorf("binaryName(%q) = %q, want an error", ref, got)
		}
	}
}

func TestTagDir(t *testing.T) {
	for ref, want := range map[string]string{
		"registry.k8s.io/kube-apiserver:v1.35.4":          "v1.35",
		"registry.k8s.io/kube-apiserver:v1.36.3@sha256:0": "v1.36",
		"registry.k8s.io/etcd:3.6.8-0":                    "",
		"localhost:5000/team/kube-scheduler":              "",
		"kube-apiserver:latest":                           "",
		"kube-apiserver:v1":                               "",
		"kube-apiserver:vx.35.1":                          "",
	} {
		if got := tagDir(ref); got != want {
			t.Errorf("tagDir(%q) = %q, want %q", ref, got, want)
		}
	}
}

// A minor version's binary in <bin dir>/vX.Y is preferred; other versions
// and tags without one fall back to the bin dir itself.
func TestByNamePrefersTheMinorVersionDir(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"kube-apiserver", "v1.35/kube-apiserver"} {
		path := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("#!/bin/sh\n# "+f+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := newImageStore(dir)
	for ref, want := range map[string]string{
		"registry.k8s.io/kube-apiserver:v1.35.4": filepath.Join(dir, "v1.35/kube-apiserver"),
		"registry.k8s.io/kube-apiserver:v1.36.3": filepath.Join(dir, "kube-apiserver"),
		"kube-apiserver":                         filepath.Join(dir, "kube-apiserver"),
	} {
		img, err := s.byName(ref)
		if err != nil || img.path != want || img.name != "kube-apiserver" {
			t.Errorf("byName(%q) = %+v, %v; want path %s, name kube-apiserver", ref, img, err, want)
		}
	}
}
