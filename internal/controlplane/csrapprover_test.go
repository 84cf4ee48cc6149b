package controlplane

import (
	"context"
	"os"
	"testing"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/phases"
)

// TestResetRemovesDisabledCSRApprover: reset removes the approver's
// manifest, staged copy and kubeconfig that an earlier init wrote, even
// when the configuration has turned the approver off since.
func TestResetRemovesDisabledCSRApprover(t *testing.T) {
	s := initialised(t)
	off := false
	s.Config.CSRApprover.Enabled = &off
	if _, err := resetNode(context.Background(), s, ResetOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if left := regularFiles(t, s); len(left) > 0 {
		t.Errorf("reset left %v", left)
	}
}

// TestUpgradeCSRApprover: upgrade apply writes the approver's manifest
// when it differs from the rendered one, or is missing (a node initialised
// before the approver existed), leaves it when it is the same, and removes
// it when the approver is off; the result says whether it changed anything.
func TestUpgradeCSRApprover(t *testing.T) {
	s := initialised(t)
	path := s.Config.ManifestPath(config.NameCSRApprover)
	rendered, err := s.Files.ReadFile(path)
	must(t, err)
	enabled := map[string][]byte{config.NameCSRApprover: rendered}

	kubebootPods := func(data map[string][]byte) (bool, error) {
		return upgradeKubebootPods(s, nodeManifests(t, s), data)
	}
	if wrote, err := kubebootPods(enabled); err != nil || wrote {
		t.Errorf("up to date: wrote %v, %v", wrote, err)
	}
	must(t, s.Files.Remove(path))
	if wrote, err := kubebootPods(enabled); err != nil || !wrote {
		t.Errorf("missing: wrote %v, %v", wrote, err)
	}
	if got, err := s.Files.ReadFile(path); err != nil || string(got) != string(rendered) {
		t.Errorf("manifest after the upgrade: %v\n%s", err, got)
	}

	off := false
	s.Config.CSRApprover.Enabled = &off
	if wrote, err := kubebootPods(map[string][]byte{}); err != nil || !wrote {
		t.Errorf("disabled: removed %v, %v", wrote, err)
	}
	if _, err := os.Stat(s.Files.HostPath(path)); !os.IsNotExist(err) {
		t.Errorf("the disabled approver's manifest is still there: %v", err)
	}
	if wrote, err := kubebootPods(map[string][]byte{}); err != nil || wrote {
		t.Errorf("disabled and gone: wrote %v, %v", wrote, err)
	}
}

// nodeManifests is readManifests of s: the node's manifests, as the
// upgrade reads them before it writes any.
func nodeManifests(t *testing.T, s *phases.Node) map[string][]byte {
	t.Helper()
	have, err := readManifests(s)
	must(t, err)
	return have
}
