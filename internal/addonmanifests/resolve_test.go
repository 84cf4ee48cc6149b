package addonmanifests

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubeboot/kubeboot/internal/exit"
)

// clusterKinds is a cluster's discovery: Namespaces and
// CustomResourceDefinitions cluster-wide, ConfigMaps and Deployments
// namespaced.
func clusterKinds() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, meta.RESTScopeRoot)
	m.Add(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}, meta.RESTScopeRoot)
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	m.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	return m
}

// namespaces is a cluster holding the namespaces names, which counts the
// questions asked in *asked.
func namespaces(asked *int, names ...string) NamespaceExists {
	return func(name string) (bool, error) {
		*asked++
		for _, n := range names {
			if n == name {
				return true, nil
			}
		}
		return false, nil
	}
}

// read reads one manifest file of content.
func read(t *testing.T, content string) []Object {
	t.Helper()
	dir := write(t, map[string]string{"m.yaml": content})
	objs, err := Read([]string{filepath.Join(dir, "m.yaml")}, onHost)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// planned lists a plan as "String resource" in the order of the apply.
func planned(p Plan) []string {
	var out []string
	for _, r := range p.All() {
		out = append(out, r.String()+" "+r.Resource.Resource)
	}
	return out
}

const crd = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Widget, plural: widgets}
  versions: [{name: v1, served: true, storage: true}]
`

// TestResolveOrders: the Namespaces and the CustomResourceDefinitions come
// first, then the rest in the manifests' order; a namespaced object
// without a namespace goes to default; an object of a kind a
// CustomResourceDefinition among the manifests defines is resolved from
// it; each namespace is asked about once, and one the manifests create not
// at all.
func TestResolveOrders(t *testing.T) {
	objs := read(t, `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: demo}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w1}
---
`+crd+`---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: more}
---
apiVersion: v1
kind: Namespace
metadata: {name: demo}
`)
	asked := 0
	plan, err := Resolve(objs, clusterKinds(), namespaces(&asked, "default"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"Namespace demo namespaces",
		"CustomResourceDefinition widgets.example.com customresourcedefinitions",
		"Deployment demo/web deployments",
		"Widget default/w1 widgets",
		"ConfigMap default/settings configmaps",
		"ConfigMap default/more configmaps",
	}
	if got := planned(plan); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("plan\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(plan.CRDs) != 1 || !plan.Rest[1].Namespaced || plan.Namespaces[0].Namespaced {
		t.Errorf("scopes: %+v", plan)
	}
	if asked != 1 {
		t.Errorf("asked the cluster %d times, want once (for default)", asked)
	}
	if ns := objs[3].Object.GetNamespace(); ns != "" {
		t.Errorf("Resolve changed the object read: namespace %q", ns)
	}
}

// TestResolveRefuses: a missing namespace, an unknown kind, a namespace on
// a cluster-wide object and the same object twice once namespaces are
// settled are refused together, exit 2, naming file and object, before
// anything could be applied.
func TestResolveRefuses(t *testing.T) {
	tests := []struct {
		name, content string
		want          []string
	}{
		{"missing namespace", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: nowhere}\n",
			[]string{`m.yaml, document 1 (ConfigMap nowhere/a): namespace "nowhere" does not exist, and addons.manifests does not create it: add a Namespace nowhere to addons.manifests, or create it first`}},
		{"unknown kind", "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g}\n",
			[]string{"m.yaml, document 1 (Gadget g): the cluster serves no kind Gadget in example.com/v1, and no CustomResourceDefinition in addons.manifests defines it"}},
		{"kind of another version", crd + "---\napiVersion: example.com/v2\nkind: Widget\nmetadata: {name: w}\n",
			[]string{"document 2 (Widget w): the cluster serves no kind Widget in example.com/v2"}},
		{"namespace on a cluster-wide object", "apiVersion: v1\nkind: Namespace\nmetadata: {name: a, namespace: default}\n",
			[]string{`(Namespace default/a): a Namespace is not namespaced, so metadata.namespace "default" means nothing: remove it`}},
		{"twice once defaulted", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: default}\n",
			[]string{"document 2 (ConfigMap default/a): given twice, first in"}},
		{"incomplete CRD", "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: x.example.com}\nspec: {group: example.com}\n",
			[]string{"(CustomResourceDefinition x.example.com): spec.group, spec.names.kind, spec.names.plural and spec.versions are required"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			asked := 0
			plan, err := Resolve(read(t, tt.content), clusterKinds(), namespaces(&asked, "default"))
			if exit.Code(err) != exit.Usage {
				t.Fatalf("got %v (exit %d), want a usage error", err, exit.Code(err))
			}
			for _, w := range append(tt.want, "addons.manifests: ", "nothing was applied") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q:\n%v", w, err)
				}
			}
			if len(plan.All()) != 0 {
				t.Errorf("a refusal planned %v", planned(plan))
			}
		})
	}
}

// brokenDiscovery is a cluster whose discovery fails.
type brokenDiscovery struct{ meta.RESTMapper }

// RESTMapping fails as an unreachable API server does.
func (brokenDiscovery) RESTMapping(schema.GroupKind, ...string) (*meta.RESTMapping, error) {
	return nil, errors.New("connection refused")
}

// TestResolveDiscoveryError: a failing discovery or namespace lookup is
// the cluster's failure, not the user's: not exit 2.
func TestResolveDiscoveryError(t *testing.T) {
	objs := read(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")
	_, err := Resolve(objs, brokenDiscovery{}, namespaces(new(int)))
	if err == nil || exit.Code(err) == exit.Usage || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "ConfigMap a") {
		t.Errorf("got %v, want discovery's error naming the object", err)
	}
	failing := func(string) (bool, error) { return false, errors.New("timeout") }
	_, err = Resolve(objs, clusterKinds(), failing)
	if err == nil || exit.Code(err) == exit.Usage || !strings.Contains(err.Error(), `look up namespace "default" of ConfigMap default/a`) {
		t.Errorf("got %v, want the lookup's error naming the namespace and the object", err)
	}
}
