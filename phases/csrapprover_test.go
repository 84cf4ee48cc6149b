package phases

import (
	"context"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeboot/kubeboot/internal/config"
)

// TestCSRApproverPhase grants the approver's user its role, server-side,
// and changes nothing on a re-run; a disabled approver gets no grant.
func TestCSRApproverPhase(t *testing.T) {
	s, client, out := liveState(t, false)
	ctx := context.Background()
	must(t, runCSRApprover(ctx, s))
	role, err := client.RbacV1().ClusterRoles().Get(ctx, "kubeboot:csr-approver", metav1.GetOptions{})
	must(t, err)
	binding, err := client.RbacV1().ClusterRoleBindings().Get(ctx, "kubeboot:csr-approver", metav1.GetOptions{})
	must(t, err)
	if len(role.Rules) != 4 || binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 ||
		binding.Subjects[0].Kind != "User" || binding.Subjects[0].Name != "kubeboot:csr-approver" {
		t.Errorf("role %+v, binding %+v", role.Rules, binding)
	}
	if !strings.Contains(out.String(), "ClusterRoleBinding kubeboot:csr-approver created") {
		t.Errorf("output:\n%s", out)
	}
	rerunChangesNothing(t, s, client, CSRApprover)

	off := false
	s, client, out = liveState(t, false)
	s.Config.CSRApprover.Enabled = &off
	must(t, runCSRApprover(ctx, s))
	if roles, _ := client.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{}); len(roles.Items) != 0 || !strings.Contains(out.String(), "nothing to grant") {
		t.Errorf("disabled approver: roles %v, output %s", roles.Items, out)
	}
}

// TestCSRApproverManifest: write-manifests writes the approver's manifest
// with the components' when it is enabled, and removes it once it is
// turned off; preflight checks its health port, and never takes its
// manifest for a foreign file.
func TestCSRApproverManifest(t *testing.T) {
	root := t.TempDir()
	s := manifestState(t, root, "v1.36.3")
	must(t, renderAndWrite(s))
	path := s.Files.HostPath(s.Config.ManifestPath(config.NameCSRApprover))
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no approver manifest: %v", err)
	}
	manifests, err := RenderPods(s)
	must(t, err)
	listeners := PodListeners(s, manifests)
	if !slices.Contains(listeners, Listener{config.NameCSRApprover, "127.0.0.1", "10270"}) {
		t.Errorf("listeners %v lack the approver's 127.0.0.1:10270", listeners)
	}

	off := false
	disabled := manifestState(t, root, "v1.36.3")
	disabled.Config.CSRApprover.Enabled = &off
	if foreign, err := foreignManifests(disabled); err != nil || len(foreign) != 0 {
		t.Errorf("foreign manifests %v, %v: the disabled approver's manifest is still kubeboot's", foreign, err)
	}
	must(t, renderAndWrite(disabled))
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the disabled approver's manifest is still there: %v", err)
	}
	if got := readManifests(t, disabled); len(got) != 4 {
		t.Errorf("manifests %v, want the four components'", slices.Sorted(maps.Keys(got)))
	}
	again := manifestState(t, root, "v1.36.3")
	again.Config.CSRApprover.Enabled = &off
	must(t, renderAndWrite(again))
	if w := again.Files.Changes().Written; len(w) != 0 {
		t.Errorf("a re-run wrote %v", w)
	}
}
