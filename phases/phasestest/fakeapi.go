package phasestest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kubeboot/kubeboot/phases"
)

// FakeAPI is a cluster of fakes behind a *phases.Client, for the live
// phases that apply objects of any kind (addons.manifests): a fake
// clientset, whose discovery serves Resources, and a fake dynamic client
// whose server-side apply behaves as the API server's does for a field
// manager that owns every field it sets: the applied object replaces the
// stored one (its status kept), metadata.resourceVersion moves only when
// something changed, a dry run stores nothing, an object of a resource not
// served or in a namespace that does not exist is not found, and an
// applied CustomResourceDefinition is established at once and its kind
// served.
type FakeAPI struct {
	// Client is what Run.API is given.
	Client *phases.Client
	// Typed is the fake clientset; its discovery serves Typed.Resources.
	Typed *fake.Clientset
	// Dynamic is the fake dynamic client.
	Dynamic *dynamicfake.FakeDynamicClient
	// Applies are the applies stored (dry runs left out), in order, each
	// as "Kind namespace/name by MANAGER" with " (force)" when forced.
	Applies []string
	// version is the last resourceVersion given.
	version int
}

// The resources of the fake cluster's discovery.
var (
	// NamespacesResource is v1 namespaces.
	NamespacesResource = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	// ConfigMapsResource is v1 configmaps.
	ConfigMapsResource = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	// DeploymentsResource is apps/v1 deployments.
	DeploymentsResource = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	// CRDsResource is apiextensions.k8s.io/v1 customresourcedefinitions.
	CRDsResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// NewFakeAPI is a fake cluster serving Namespaces, ConfigMaps,
// Deployments and CustomResourceDefinitions, with namespaces default and
// kube-system, and typed, objects of the fake clientset (such as API
// server pods).
func NewFakeAPI(typed ...runtime.Object) *FakeAPI {
	f := &FakeAPI{Typed: fake.NewClientset(typed...), Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())}
	f.Typed.Resources = []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "namespaces", Kind: "Namespace", Verbs: allVerbs},
			{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: allVerbs},
		}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{{Name: "deployments", Kind: "Deployment", Namespaced: true, Verbs: allVerbs}}},
		{GroupVersion: "apiextensions.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "customresourcedefinitions", Kind: "CustomResourceDefinition", Verbs: allVerbs}}},
	}
	f.Client = &phases.Client{Interface: f.Typed, Dynamic: f.Dynamic}
	f.Dynamic.PrependReactor("patch", "*", f.apply)
	for _, ns := range []string{metav1.NamespaceDefault, metav1.NamespaceSystem} {
		f.Seed(NamespacesResource, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}})
	}
	return f
}

// allVerbs are the verbs every fake resource has.
var allVerbs = metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}

// Seed stores obj as a resource, as if someone had created it; it panics
// on an object the tracker refuses, a bug of the test.
func (f *FakeAPI) Seed(resource schema.GroupVersionResource, obj *unstructured.Unstructured) {
	obj = obj.DeepCopy()
	f.version++
	obj.SetResourceVersion(strconv.Itoa(f.version))
	if err := f.Dynamic.Tracker().Create(resource, obj, obj.GetNamespace()); err != nil {
		panic(err)
	}
}

// Get is the stored object, or nil.
func (f *FakeAPI) Get(resource schema.GroupVersionResource, namespace, name string) *unstructured.Unstructured {
	obj, err := f.Dynamic.Tracker().Get(resource, namespace, name)
	if err != nil {
		return nil
	}
	return obj.(*unstructured.Unstructured)
}

// apply is the server-side apply of the fake dynamic client.
func (f *FakeAPI) apply(action clienttesting.Action) (bool, runtime.Object, error) {
	patch, ok := action.(clienttesting.PatchActionImpl)
	if !ok || patch.GetPatchType() != types.ApplyPatchType {
		return false, nil, nil
	}
	resource, ns, name := patch.GetResource(), patch.GetNamespace(), patch.GetName()
	if err := f.servable(resource, ns, name); err != nil {
		return true, nil, err
	}
	want := &unstructured.Unstructured{}
	if err := want.UnmarshalJSON(patch.GetPatch()); err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	have := f.Get(resource, ns, name)
	if have != nil {
		if status, ok := have.Object["status"]; ok {
			want.Object["status"] = status
		}
		want.SetResourceVersion(have.GetResourceVersion())
		if same(have, want) {
			return true, have, nil
		}
	}
	if len(patch.PatchOptions.DryRun) > 0 {
		return true, want, nil
	}
	f.version++
	want.SetResourceVersion(strconv.Itoa(f.version))
	if err := f.store(resource, ns, want, have != nil); err != nil {
		return true, nil, err
	}
	force := ""
	if patch.PatchOptions.Force != nil && *patch.PatchOptions.Force {
		force = " (force)"
	}
	f.Applies = append(f.Applies, fmt.Sprintf("%s %s by %s%s", want.GetKind(), qualified(ns, name), patch.PatchOptions.FieldManager, force))
	return true, want, nil
}

// servable refuses an object of a resource discovery does not serve, or in
// a namespace that does not exist, as the API server does: not found.
func (f *FakeAPI) servable(resource schema.GroupVersionResource, ns, name string) error {
	served := slices.ContainsFunc(f.Typed.Resources, func(l *metav1.APIResourceList) bool {
		return l.GroupVersion == resource.GroupVersion().String() && slices.ContainsFunc(l.APIResources, func(r metav1.APIResource) bool { return r.Name == resource.Resource })
	})
	if !served {
		return apierrors.NewNotFound(resource.GroupResource(), name)
	}
	if ns != "" && f.Get(NamespacesResource, "", ns) == nil {
		return apierrors.NewNotFound(NamespacesResource.GroupResource(), ns)
	}
	return nil
}

// store creates or replaces obj; a CustomResourceDefinition is
// established at once and its kind served.
func (f *FakeAPI) store(resource schema.GroupVersionResource, ns string, obj *unstructured.Unstructured, exists bool) error {
	if resource == CRDsResource {
		if err := establish(obj); err != nil {
			return err
		}
		f.serve(obj)
	}
	if exists {
		return f.Dynamic.Tracker().Update(resource, obj, ns)
	}
	return f.Dynamic.Tracker().Create(resource, obj, ns)
}

// establish sets crd's Established condition, as the API server does.
func establish(crd *unstructured.Unstructured) error {
	return unstructured.SetNestedSlice(crd.Object, []any{map[string]any{"type": "Established", "status": "True"}}, "status", "conditions")
}

// serve adds the kind crd defines, at each of its versions, to discovery.
func (f *FakeAPI) serve(crd *unstructured.Unstructured) {
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	scope, _, _ := unstructured.NestedString(crd.Object, "spec", "scope")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		version, _, _ := unstructured.NestedString(v.(map[string]any), "name")
		f.Typed.Resources = append(f.Typed.Resources, &metav1.APIResourceList{GroupVersion: group + "/" + version,
			APIResources: []metav1.APIResource{{Name: plural, Kind: kind, Namespaced: scope == "Namespaced", Verbs: allVerbs}}})
	}
}

// same says whether two objects are equal as JSON.
func same(a, b *unstructured.Unstructured) bool {
	ja, errA := json.Marshal(a.Object)
	jb, errB := json.Marshal(b.Object)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

// qualified is namespace/name, or name without a namespace.
func qualified(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}
