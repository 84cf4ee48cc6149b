package addonmanifests

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// DefaultNamespace is where a namespaced object without metadata.namespace
// goes, as with kubectl apply.
const DefaultNamespace = "default"

// The kinds applied before the others, since those may need them.
var (
	// namespaceKind is a Namespace's group and kind.
	namespaceKind = schema.GroupKind{Kind: "Namespace"}
	// crdKind is a CustomResourceDefinition's group and kind.
	crdKind = schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}
)

// Resolved is an object as it is applied: its API resource, and its
// namespace settled.
type Resolved struct {
	Object
	// Resource is the API resource the object is served as.
	Resource schema.GroupVersionResource
	// Namespaced says the resource is namespaced; the object then has its
	// namespace (DefaultNamespace when the manifest gave none).
	Namespaced bool
}

// Plan is the user's objects in the order of their apply: the Namespaces
// and the CustomResourceDefinitions before everything else, since the
// rest may live in those namespaces or be of those kinds; the
// CustomResourceDefinitions must be established before Rest is applied.
// Each part keeps the manifests' order.
type Plan struct {
	// Namespaces are the manifests' Namespaces.
	Namespaces []Resolved
	// CRDs are the manifests' CustomResourceDefinitions.
	CRDs []Resolved
	// Rest are every other object.
	Rest []Resolved
}

// All is every object of the plan, in the order of the apply.
func (p Plan) All() []Resolved {
	return slices.Concat(p.Namespaces, p.CRDs, p.Rest)
}

// NamespaceExists says whether the cluster has the namespace name.
type NamespaceExists func(name string) (bool, error)

// Resolve settles where each object goes, from the cluster's kinds
// (mapper, from its discovery) and namespaces (exists), before anything is
// applied. A kind the cluster does not serve is one a
// CustomResourceDefinition among objs defines, or refused. A namespaced
// object without a namespace goes to DefaultNamespace; one whose namespace
// neither exists nor is among objs is refused, and so is a cluster-scoped
// object that names a namespace, and the same object twice once namespaces
// are settled. Every refusal is listed in one *exit.UsageError; an error
// of discovery or of exists is returned as it is.
func Resolve(objs []Object, mapper meta.RESTMapper, exists NamespaceExists) (Plan, error) {
	custom, err := customKinds(objs)
	if err != nil {
		return Plan{}, err
	}
	var p problems
	var resolved []Resolved
	for _, o := range objs {
		r, problem, err := resolve(o, mapper, custom)
		if err != nil {
			return Plan{}, err
		}
		if problem != "" {
			p.add("%s", problem)
			continue
		}
		resolved = append(resolved, r)
	}
	p.addAll(duplicates(objectsOf(resolved)))
	missing, err := missingNamespaces(resolved, exists)
	if err != nil {
		return Plan{}, err
	}
	p.addAll(missing)
	if err := p.err(); err != nil {
		return Plan{}, err
	}
	return order(resolved), nil
}

// customKind is what a CustomResourceDefinition among the manifests says
// of the kind it defines.
type customKind struct {
	resource   schema.GroupVersionResource
	namespaced bool
}

// customKinds are the kinds, at each version, that the manifests'
// CustomResourceDefinitions define.
func customKinds(objs []Object) (map[schema.GroupVersionKind]customKind, error) {
	kinds := map[schema.GroupVersionKind]customKind{}
	for _, o := range objs {
		if o.GroupVersionKind().GroupKind() != crdKind {
			continue
		}
		spec, _, _ := unstructured.NestedMap(o.Object.Object, "spec")
		group, _, _ := unstructured.NestedString(spec, "group")
		kind, _, _ := unstructured.NestedString(spec, "names", "kind")
		plural, _, _ := unstructured.NestedString(spec, "names", "plural")
		scope, _, _ := unstructured.NestedString(spec, "scope")
		versions, _, _ := unstructured.NestedSlice(spec, "versions")
		if group == "" || kind == "" || plural == "" || len(versions) == 0 {
			return nil, problems{fmt.Sprintf("%s (%s): spec.group, spec.names.kind, spec.names.plural and spec.versions are required", o.Source(), o)}.err()
		}
		for _, v := range versions {
			name, _, _ := unstructured.NestedString(asMap(v), "name")
			kinds[schema.GroupVersionKind{Group: group, Version: name, Kind: kind}] = customKind{
				resource:   schema.GroupVersionResource{Group: group, Version: name, Resource: plural},
				namespaced: scope == "Namespaced",
			}
		}
	}
	return kinds, nil
}

// asMap is v as a JSON object, or nil.
func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// resolve settles one object: its resource from the cluster's discovery,
// or from a CustomResourceDefinition among the manifests, and its
// namespace. A refusal is returned as problem; err is discovery's.
func resolve(o Object, mapper meta.RESTMapper, custom map[schema.GroupVersionKind]customKind) (r Resolved, problem string, err error) {
	gvk := o.GroupVersionKind()
	r = Resolved{Object: o}
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	switch def, defined := custom[gvk]; {
	case err == nil:
		r.Resource, r.Namespaced = mapping.Resource, mapping.Scope.Name() == meta.RESTScopeNameNamespace
	case meta.IsNoMatchError(err) && defined:
		r.Resource, r.Namespaced = def.resource, def.namespaced
	case meta.IsNoMatchError(err):
		return r, fmt.Sprintf("%s (%s): the cluster serves no kind %s in %s, and no CustomResourceDefinition in %s defines it: fix apiVersion and kind, or add the CustomResourceDefinition to %s",
			o.Source(), o, gvk.Kind, gvk.GroupVersion(), Field, Field), nil
	default:
		return r, "", fmt.Errorf("%s (%s): look up kind %s in %s: %w", o.Source(), o, gvk.Kind, gvk.GroupVersion(), err)
	}
	ns := o.Object.GetNamespace()
	switch {
	case !r.Namespaced && ns != "":
		return r, fmt.Sprintf("%s (%s): a %s is not namespaced, so metadata.namespace %q means nothing: remove it", o.Source(), o, gvk.Kind, ns), nil
	case r.Namespaced && ns == "":
		r.Object.Object = o.Object.DeepCopy()
		r.Object.Object.SetNamespace(DefaultNamespace)
	}
	return r, "", nil
}

// objectsOf are the objects of resolved.
func objectsOf(resolved []Resolved) []Object {
	objs := make([]Object, len(resolved))
	for i, r := range resolved {
		objs[i] = r.Object
	}
	return objs
}

// missingNamespaces refuses each namespaced object whose namespace neither
// the manifests create nor exists in the cluster; exists is asked once per
// namespace.
func missingNamespaces(resolved []Resolved, exists NamespaceExists) ([]string, error) {
	known := map[string]bool{}
	for _, r := range resolved {
		if r.GroupVersionKind().GroupKind() == namespaceKind {
			known[r.Object.Object.GetName()] = true
		}
	}
	var out []string
	for _, r := range resolved {
		ns := r.Object.Object.GetNamespace()
		if !r.Namespaced {
			continue
		}
		if _, asked := known[ns]; !asked {
			found, err := exists(ns)
			if err != nil {
				return nil, fmt.Errorf("look up namespace %q of %s (%s): %w", ns, r.Object, r.Source(), err)
			}
			known[ns] = found
		}
		if !known[ns] {
			out = append(out, fmt.Sprintf("%s (%s): namespace %q does not exist, and %s does not create it: add a Namespace %s to %s, or create it first",
				r.Source(), r.Object, ns, Field, ns, Field))
		}
	}
	return out, nil
}

// order puts the Namespaces and the CustomResourceDefinitions first.
func order(resolved []Resolved) Plan {
	var p Plan
	for _, r := range resolved {
		switch r.GroupVersionKind().GroupKind() {
		case namespaceKind:
			p.Namespaces = append(p.Namespaces, r)
		case crdKind:
			p.CRDs = append(p.CRDs, r)
		default:
			p.Rest = append(p.Rest, r)
		}
	}
	return p
}
