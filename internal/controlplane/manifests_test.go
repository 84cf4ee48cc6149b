package controlplane

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

// userManifest is the file of the user's manifests the tests write.
const userManifest = "/etc/kubeboot/manifests/app.yaml"

// withManifests gives s's configuration addons.manifests, userManifest
// holding content, turns CoreDNS and kube-proxy off (so nothing waits for
// their rollout) and hands it a fake cluster, with typed objects.
func withManifests(t *testing.T, s *phases.Node, content string, typed ...runtime.Object) *phasestest.FakeAPI {
	t.Helper()
	path := s.Files.HostPath(userManifest)
	must(t, os.MkdirAll(filepath.Dir(path), 0o755))
	must(t, os.WriteFile(path, []byte(content), 0o600))
	s.Config.Addons.Manifests = []string{userManifest}
	s.Config.Addons.CoreDNS.Disabled, s.Config.Addons.KubeProxy.Disabled = true, true
	s.Config.Addons.CNI = config.CNI{Provider: config.CNINone}
	f := phasestest.NewFakeAPI(typed...)
	s.API = f.Client
	return f
}

const appManifest = "apiVersion: v1\nkind: Namespace\nmetadata: {name: demo}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: demo}\ndata: {level: info}\n"

// TestUpgradeAppliesManifests: upgrade apply applies the user's manifests
// again, as init's addon phase does, taking back a changed field; while
// another control-plane node runs an older API server it leaves them, as
// it leaves the addons.
func TestUpgradeAppliesManifests(t *testing.T) {
	s := phasestest.NewNode(t, t.TempDir(), "v1.36.3")
	var out bytes.Buffer
	s.Report = output.NewReporter(&out, false)
	f := withManifests(t, s, appManifest)
	ctx := context.Background()
	must(t, upgradeAddons(ctx, s, time.Second))
	want := []string{"Namespace demo by kubeboot (force)", "ConfigMap demo/settings by kubeboot (force)"}
	if !slices.Equal(f.Applies, want) {
		t.Fatalf("upgrade apply applied %v, want %v", f.Applies, want)
	}

	cm := f.Get(phasestest.ConfigMapsResource, "demo", "settings")
	must(t, unstructured.SetNestedField(cm.Object, "debug", "data", "level"))
	must(t, f.Dynamic.Tracker().Update(phasestest.ConfigMapsResource, cm, "demo"))
	must(t, upgradeAddons(ctx, s, time.Second))
	if level, _, _ := unstructured.NestedString(f.Get(phasestest.ConfigMapsResource, "demo", "settings").Object, "data", "level"); level != "info" {
		t.Errorf("after upgrade apply the ConfigMap's level is %q, want info:\n%s", level, out.String())
	}

	behind := phasestest.NewNode(t, t.TempDir(), "v1.36.3")
	behind.Report = output.NewReporter(&out, false)
	f = withManifests(t, behind, appManifest, apiServerBehind())
	must(t, upgradeAddons(ctx, behind, time.Second))
	if len(f.Applies) != 0 || !strings.Contains(out.String(), "addons left as they are: node2") {
		t.Errorf("with node2 behind, upgrade apply applied %v:\n%s", f.Applies, out.String())
	}
}

// TestDiffShowsManifestDrift: diff shows each object of the user's
// manifests that init would create or change, as a user-object
// Difference with a unified diff; none once applied.
func TestDiffShowsManifestDrift(t *testing.T) {
	s := initialised(t)
	s.Options.Offline = false
	f := withManifests(t, s, appManifest)
	ctx := context.Background()
	diffs, err := DiffNode(ctx, s, false)
	must(t, err)
	if got := changes(diffs); !slices.Equal(got, []string{"create user-object Namespace demo", "create user-object ConfigMap demo/settings"}) {
		t.Errorf("before init's addon phase: %v", got)
	}

	must(t, phasestest.Run(s, phases.AddonManifests))
	cm := f.Get(phasestest.ConfigMapsResource, "demo", "settings")
	must(t, unstructured.SetNestedField(cm.Object, "debug", "data", "level"))
	must(t, f.Dynamic.Tracker().Update(phasestest.ConfigMapsResource, cm, "demo"))
	diffs, err = DiffNode(ctx, s, false)
	must(t, err)
	if len(diffs) != 1 || diffs[0].Kind != KindUserObject || diffs[0].Change != ChangeUpdate ||
		!strings.Contains(diffs[0].Diff, "--- ConfigMap demo/settings (live)") || !strings.Contains(diffs[0].Diff, "-  level: debug") || !strings.Contains(diffs[0].Diff, "+  level: info") {
		t.Errorf("after an edit: %+v", diffs)
	}
}

// TestDiffRefusesBadManifests: a manifest init would refuse fails diff,
// exit 2, naming the file and the object, rather than being skipped.
func TestDiffRefusesBadManifests(t *testing.T) {
	s := initialised(t)
	withManifests(t, s, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: nowhere}\n")
	_, err := DiffNode(context.Background(), s, false)
	if exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), userManifest+`, document 1 (ConfigMap nowhere/a): namespace "nowhere" does not exist`) {
		t.Errorf("got %v (exit %d), want exit 2 naming the file and the object", err, exit.Code(err))
	}
}

// TestUpgradePreflightChecksManifests: upgrade apply refuses, before any
// other check and before anything changes, manifests it could not apply
// (here an object in a namespace that neither exists nor comes with
// them): exit 2 naming the file and the object, nothing applied.
func TestUpgradePreflightChecksManifests(t *testing.T) {
	s := phasestest.NewNode(t, t.TempDir(), "v1.36.3")
	s.Report = output.NewReporter(&bytes.Buffer{}, false)
	f := withManifests(t, s, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: nowhere}\n")
	err := upgradePreflight(context.Background(), s, nil, nil, func() error { _, err := checkKubeletSkew(context.Background(), s, s.API); return err }, func() (bool, error) { return true, nil })
	if exit.Code(err) != exit.Usage || err == nil || !strings.Contains(err.Error(), userManifest) || !strings.Contains(err.Error(), "nowhere") {
		t.Errorf("upgrade preflight with a ConfigMap in a missing namespace: exit %d, %v", exit.Code(err), err)
	}
	if len(f.Applies) != 0 {
		t.Errorf("applied %v", f.Applies)
	}
}

// TestUpgradePreflightProbesOnlyBeforeAChange: the control plane must be
// healthy before a manifest of it changes; an upgrade that replaces no
// component does not probe it. The context is done, so that a probe fails
// at once, without a connection.
func TestUpgradePreflightProbesOnlyBeforeAChange(t *testing.T) {
	s := initialised(t)
	s.Report = output.NewReporter(&bytes.Buffer{}, false)
	s.API = fake.NewClientset()
	current, _, err := wantedPods(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	skew := func() error { return nil }
	decoded := 0
	pods := func() (map[string]*corev1.Pod, error) { decoded++; return current, nil }
	if err := upgradePreflight(ctx, s, current[config.NameAPIServer], pods, skew, func() (bool, error) { return false, nil }); err != nil || decoded > 0 {
		t.Errorf("with no manifest to change: %v, the node's pods decoded %d times", err, decoded)
	}
	err = upgradePreflight(ctx, s, current[config.NameAPIServer], pods, skew, func() (bool, error) { return true, nil })
	if err == nil || !strings.Contains(err.Error(), "not healthy before the upgrade") {
		t.Errorf("with a manifest to change, a control plane that does not answer: %v", err)
	}
}
