package lab

import "testing"

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
