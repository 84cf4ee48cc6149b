package lab

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestKubeadmFlags: the kubelet gets kubeadm's flags from the
// kubeadm-flags.env kubeadm join writes, as kubeadm's drop-in passes them.
func TestKubeadmFlags(t *testing.T) {
	env := "# written by kubeadm\nKUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=unix:///tmp/w2/cri.sock --hostname-override=w2\"\n"
	want := []string{"--container-runtime-endpoint=unix:///tmp/w2/cri.sock", "--hostname-override=w2"}
	if got := kubeadmFlags(env); !slices.Equal(got, want) {
		t.Errorf("flags %q, want %q", got, want)
	}
	if got := kubeadmFlags("OTHER=1\n"); got != nil {
		t.Errorf("flags %q from a file without KUBELET_KUBEADM_ARGS", got)
	}
}

// TestIsolateRefusesTheHostsNamespace: run beside its parent, in the same
// mount namespace, Isolate overlays nothing and says how to run it.
func TestIsolateRefusesTheHostsNamespace(t *testing.T) {
	dir := t.TempDir()
	err := KubeadmNode{Dir: dir}.Isolate()
	if err == nil || !strings.Contains(err.Error(), "mount namespace of its own") {
		t.Fatalf("Isolate in its parent's mount namespace: %v, want a refusal", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("the refusal wrote %v", entries)
	}
}
