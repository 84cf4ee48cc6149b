package lab

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCheckFeatureGates: gates the release's kube-apiserver knows and may
// set pass; an unknown gate and a gate locked to its default are refused
// as InputErrors naming the file, the field and the reason.
func TestCheckFeatureGates(t *testing.T) {
	binDir := os.Getenv("KUBEBOOT_BIN_DIR")
	if _, err := os.Stat(filepath.Join(binDir, "kube-apiserver")); binDir == "" || err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the check needs kube-apiserver in KUBEBOOT_BIN_DIR (%q): make binaries", binDir)
		}
		t.Skip("the check needs kube-apiserver in KUBEBOOT_BIN_DIR: make binaries")
	}
	for _, tc := range []struct {
		gates map[string]bool
		want  string
	}{
		{map[string]bool{"ClusterTrustBundle": true, "AllAlpha": false}, ""},
		{map[string]bool{"ClusterTrustBundle": true, "NoSuchGate": true}, "featureGates: unrecognized feature gate: NoSuchGate"},
		{map[string]bool{"CPUManagerPolicyOptions": false}, "featureGates: cannot set feature gate CPUManagerPolicyOptions to false, feature is locked to true"},
	} {
		c := &Cluster{FeatureGates: tc.gates, source: "lab.yaml"}
		err := c.checkFeatureGates(t.Context(), binDir)
		var refused *InputError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.gates, err)
		case tc.want != "" && (!errors.As(err, &refused) || !strings.Contains(err.Error(), "lab.yaml: "+tc.want)):
			t.Errorf("%v: %v, want an InputError with %q", tc.gates, err, tc.want)
		}
	}
}

// TestAddonRollouts: Up waits for kubeboot's pod network and enforcer
// unless the patch makes the pod network the user's own (provider none),
// and for CoreDNS and kube-proxy always.
func TestAddonRollouts(t *testing.T) {
	own := map[string]any{"addons": map[string]any{"cni": map[string]any{"provider": "none"}, "manifests": []any{"/etc/kubeboot/manifests"}}}
	flannel := map[string]any{"addons": map[string]any{"cni": map[string]any{"provider": "flannel"}}}
	for _, tc := range []struct {
		name  string
		patch map[string]any
		want  []string
	}{
		{"no patch", nil, []string{"daemonset/kube-flannel", "daemonset/kubeboot-network-policy", "deployment/coredns", "daemonset/kube-proxy"}},
		{"flannel named", flannel, []string{"daemonset/kube-flannel", "daemonset/kubeboot-network-policy", "deployment/coredns", "daemonset/kube-proxy"}},
		{"other fields", map[string]any{"apiServer": map[string]any{"certSANs": []any{"x"}}}, []string{"daemonset/kube-flannel", "daemonset/kubeboot-network-policy", "deployment/coredns", "daemonset/kube-proxy"}},
		{"own pod network", own, []string{"deployment/coredns", "daemonset/kube-proxy"}},
	} {
		c := &Cluster{ClusterConfigurationPatch: tc.patch}
		if got := c.addonRollouts(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
