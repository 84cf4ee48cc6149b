package phases_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

// manifestsDir is the node directory the tests' addons.manifests names.
const manifestsDir = "/etc/kubeboot/manifests"

// manifestsNode is a control-plane node whose addons.manifests is
// manifestsDir, holding files, in a fake cluster that has namespaces
// default and kube-system; its output goes to the buffer.
func manifestsNode(t *testing.T, files map[string]string) (*phases.Node, *phasestest.FakeAPI, *bytes.Buffer) {
	t.Helper()
	s := phasestest.NewNode(t, t.TempDir(), "v1.36.3")
	var out bytes.Buffer
	s.Report = output.NewReporter(&out, false)
	writeManifests(t, s, files)
	s.Config.Addons.Manifests = []string{manifestsDir}
	f := phasestest.NewFakeAPI()
	s.API = f.Client
	return s, f, &out
}

// writeManifests writes files into manifestsDir on s's node.
func writeManifests(t *testing.T, s *phases.Node, files map[string]string) {
	t.Helper()
	dir := s.Files.HostPath(manifestsDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// app is a manifest of an application: its Deployment before its
// Namespace, and a custom resource before its CustomResourceDefinition,
// which the phase applies first all the same.
var app = map[string]string{
	"10-app.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: demo}
spec: {replicas: 2}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w1}
spec: {size: 3}
---
apiVersion: v1
kind: Namespace
metadata: {name: demo}
`,
	"20-crd.yaml": `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Widget, plural: widgets}
  versions: [{name: v1, served: true, storage: true}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {level: info}
`,
}

// TestAddonManifestsApplies: every object is applied by server-side apply
// as kubeboot, forced, the Namespace and the CustomResourceDefinition
// first (established before its Widget), a ConfigMap without a namespace
// in default; a re-run changes nothing, and a field someone changed is
// taken back.
func TestAddonManifestsApplies(t *testing.T) {
	s, f, out := manifestsNode(t, app)
	if !phases.AddonManifests.LiveOnly || phases.Addon.Subphases[len(phases.Addon.Subphases)-1].Name != "addon/manifests" {
		t.Fatal("addon/manifests is not addon's LiveOnly last part")
	}
	addon := workflow.Runner[*phases.Node]{Phases: []workflow.Phase[*phases.Node]{phases.Addon}}
	ran, err := addon.Run(context.Background(), s, []string{"addon/cni", "addon/coredns", "addon/kube-proxy"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ran, []string{"addon/manifests"}) {
		t.Errorf("ran %v", ran)
	}
	want := []string{
		"Namespace demo by kubeboot (force)",
		"CustomResourceDefinition widgets.example.com by kubeboot (force)",
		"Deployment demo/web by kubeboot (force)",
		"Widget default/w1 by kubeboot (force)",
		"ConfigMap default/settings by kubeboot (force)",
	}
	if !slices.Equal(f.Applies, want) {
		t.Errorf("applied\n%s\nwant\n%s", strings.Join(f.Applies, "\n"), strings.Join(want, "\n"))
	}
	for _, line := range []string{"[addon/manifests] Namespace demo created", "[addon/manifests] 1 CustomResourceDefinition(s) established", "[addon/manifests] Widget default/w1 created"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("output lacks %q:\n%s", line, out)
		}
	}

	out.Reset()
	if err := phases.AddonManifests.Run(context.Background(), s); err != nil {
		t.Fatalf("re-run: %v", err)
	}
	if len(f.Applies) != len(want) || strings.Count(out.String(), " unchanged") != len(want) {
		t.Errorf("the re-run changed objects: %v\n%s", f.Applies[len(want):], out)
	}

	cm := f.Get(phasestest.ConfigMapsResource, "default", "settings")
	mustDo(t, unstructured.SetNestedField(cm.Object, "debug", "data", "level"))
	mustDo(t, f.Dynamic.Tracker().Update(phasestest.ConfigMapsResource, cm, "default"))
	out.Reset()
	mustDo(t, phases.AddonManifests.Run(context.Background(), s))
	if level, _, _ := unstructured.NestedString(f.Get(phasestest.ConfigMapsResource, "default", "settings").Object, "data", "level"); level != "info" || !strings.Contains(out.String(), "ConfigMap default/settings updated") {
		t.Errorf("after a re-run the ConfigMap's level is %q:\n%s", level, out)
	}
}

// TestAddonManifestsRefuses: a manifest in a namespace that neither exists
// nor is created, of a kind nothing serves, or that does not parse, is
// refused, exit 2, naming file and object, and nothing is applied; bad
// files are refused before any client is built.
func TestAddonManifestsRefuses(t *testing.T) {
	tests := []struct {
		name, content string
		want          string
	}{
		{"missing namespace", "apiVersion: v1\nkind: Namespace\nmetadata: {name: demo}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: demo}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: nowhere}\n",
			manifestsDir + `/app.yaml, document 3 (ConfigMap nowhere/b): namespace "nowhere" does not exist`},
		{"unknown kind", "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g}\n",
			manifestsDir + "/app.yaml, document 1 (Gadget g): the cluster serves no kind Gadget in example.com/v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, f, _ := manifestsNode(t, map[string]string{"app.yaml": tt.content})
			err := phases.AddonManifests.Run(context.Background(), s)
			if exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v (exit %d), want exit 2 saying %q", err, exit.Code(err), tt.want)
			}
			if len(f.Applies) != 0 {
				t.Errorf("a refused manifest applied %v", f.Applies)
			}
		})
	}
	t.Run("does not parse", func(t *testing.T) {
		s, _, _ := manifestsNode(t, map[string]string{"app.yaml": "apiVersion: v1\nkind: [\n"})
		s.API = nil
		err := phases.AddonManifests.Run(context.Background(), s)
		if exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), manifestsDir+"/app.yaml, document 1 does not parse") || s.API != nil {
			t.Errorf("got %v (exit %d), client built %v; want exit 2 before any client", err, exit.Code(err), s.API != nil)
		}
	})
}

// TestAddonManifestsNone: without addons.manifests, or with only files
// that hold no object, the phase says so and builds no client; diff says
// nothing.
func TestAddonManifestsNone(t *testing.T) {
	s, _, out := manifestsNode(t, map[string]string{"empty.yaml": "# nothing yet\n", "notes.txt": "not a manifest"})
	s.API = nil
	if err := phases.AddonManifests.Run(context.Background(), s); err != nil || s.API != nil || !strings.Contains(out.String(), "the files of addons.manifests hold no object: nothing to apply") {
		t.Errorf("only empty files: got %v, client built %v:\n%s", err, s.API != nil, out)
	}
	s.Config.Addons.Manifests = nil
	out.Reset()
	if err := phases.AddonManifests.Run(context.Background(), s); err != nil || s.API != nil || !strings.Contains(out.String(), "addons.manifests lists no file: nothing to apply") {
		t.Errorf("no addons.manifests: got %v, client built %v:\n%s", err, s.API != nil, out)
	}
	out.Reset()
	if drifts, err := phases.ManifestsDrift(context.Background(), s); err != nil || len(drifts) != 0 || out.Len() > 0 || s.API != nil {
		t.Errorf("the drift of no manifests: %v, %v, client built %v:\n%s", drifts, err, s.API != nil, out)
	}
}

// TestManifestsDrift: before the apply every object is to be created (the
// Widget and the Deployment shown as written, since their kind and
// namespace come with the manifests); after it none drifts; a changed
// field and a deleted object show.
func TestManifestsDrift(t *testing.T) {
	s, f, _ := manifestsNode(t, app)
	ctx := context.Background()
	drifts, err := phases.ManifestsDrift(ctx, s)
	mustDo(t, err)
	var created []string
	for _, d := range drifts {
		if d.Live == nil {
			created = append(created, d.Object)
		}
	}
	want := []string{"Namespace demo", "CustomResourceDefinition widgets.example.com", "Deployment demo/web", "Widget default/w1", "ConfigMap default/settings"}
	if !slices.Equal(created, want) || len(drifts) != len(want) {
		t.Errorf("before the apply: %v to create of %d drifts, want %v", created, len(drifts), want)
	}
	if len(f.Applies) != 0 {
		t.Errorf("the drift applied %v", f.Applies)
	}

	mustDo(t, phases.AddonManifests.Run(ctx, s))
	drifts, err = phases.ManifestsDrift(ctx, s)
	mustDo(t, err)
	if len(drifts) != 0 {
		t.Errorf("applied manifests drift: %+v", drifts)
	}

	cm := f.Get(phasestest.ConfigMapsResource, "default", "settings")
	mustDo(t, unstructured.SetNestedField(cm.Object, "debug", "data", "level"))
	mustDo(t, f.Dynamic.Tracker().Update(phasestest.ConfigMapsResource, cm, "default"))
	mustDo(t, f.Dynamic.Tracker().Delete(phasestest.DeploymentsResource, "demo", "web"))
	drifts, err = phases.ManifestsDrift(ctx, s)
	mustDo(t, err)
	if len(drifts) != 2 || drifts[0].Object != "Deployment demo/web" || drifts[0].Live != nil ||
		drifts[1].Object != "ConfigMap default/settings" || !strings.Contains(string(drifts[1].Live), "level: debug") || !strings.Contains(string(drifts[1].Wanted), "level: info") {
		t.Errorf("drifts after an edit and a delete: %+v", drifts)
	}
}

// mustDo fails the test on an error.
func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
