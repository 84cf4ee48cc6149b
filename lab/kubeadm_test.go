package lab

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestKubeadmFlags: the kubelet gets kubeadm's flags from the
// kubeadm-flags.env kubeadm join writes, as kubeadm's drop-in passes them,
// and only once the whole line is there: kubeadm writes the file in place.
func TestKubeadmFlags(t *testing.T) {
	env := "# written by kubeadm\nKUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=unix:///tmp/w2/cri.sock --hostname-override=w2\"\n"
	want := []string{"--container-runtime-endpoint=unix:///tmp/w2/cri.sock", "--hostname-override=w2"}
	if got, complete := kubeadmFlags(env); !complete || !slices.Equal(got, want) {
		t.Errorf("flags %q (complete %v), want %q", got, complete, want)
	}
	for _, partial := range []string{"", "OTHER=1\n", env[:len(env)-1], env[:len(env)-20], "KUBELET_KUBEADM_ARGS="} {
		if got, complete := kubeadmFlags(partial); complete || got != nil {
			t.Errorf("flags %q (complete %v) from %q, want none yet", got, complete, partial)
		}
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
