package phases

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/addonmanifests"
)

// Drift is a cluster object that the addon phase would change: one of the
// addons' or of the user's manifests.
type Drift struct {
	// Object is the object's kind and namespace/name, such as
	// "Deployment kube-system/coredns".
	Object string
	// Live is the stored object as YAML, without its status and the API
	// server's bookkeeping; empty when the object does not exist.
	Live []byte
	// Wanted is the object as the apply would store it, in the same form.
	Wanted []byte
	// Replace says that the apply would delete and recreate the object,
	// for a field the API server does not change in place.
	Replace bool
}

// AddonDrift computes, by server-side dry runs, which objects of the
// addons the configuration turns on the addon phase would change. A
// turned-off addon is left as it is, so it shows no drift.
func AddonDrift(ctx context.Context, s *Node) ([]Drift, error) {
	client, err := APIClient(s)
	if err != nil {
		return nil, err
	}
	sets, err := enabledAddons(s)
	if err != nil {
		return nil, err
	}
	// Dry runs change nothing, so every addon's objects go in one pass.
	drifts := []Drift{}
	if err := (applyRun{s: s, drifts: &drifts}).all(ctx, client, joined(sets)); err != nil {
		return nil, err
	}
	return drifts, nil
}

// ManifestsDrift computes, by server-side dry runs, which objects of the
// user's manifests (addons.manifests) the addon/manifests phase would
// change, after reading, checking and resolving them as the phase does
// (a bad manifest is the same *exit.UsageError). An object whose
// namespace or CustomResourceDefinition the manifests create, and which
// the cluster has not got yet, cannot be dry-run: it shows as written, to
// be created. Without addons.manifests there is none.
func ManifestsDrift(ctx context.Context, s *Node) ([]Drift, error) {
	plan, dyn, err := planManifests(ctx, s)
	if err != nil || dyn == nil {
		return nil, err
	}
	drifts := []Drift{}
	for _, o := range plan.All() {
		drift, err := manifestDrift(ctx, dyn, o)
		if err != nil {
			return nil, err
		}
		if drift != nil {
			drifts = append(drifts, *drift)
		}
	}
	return drifts, nil
}

// manifestDrift dry-runs the apply of o and returns what it would change,
// or nil when it would change nothing.
func manifestDrift(ctx context.Context, dyn dynamic.Interface, o addonmanifests.Resolved) (*Drift, error) {
	client, name := resourceOf(dyn, o), o.Object.Object.GetName()
	drift := &Drift{Object: o.String()}
	have, err := client.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("get %s (%s): %w", o.Object, o.Source(), err)
	default:
		if drift.Live, err = comparable(have); err != nil {
			return nil, err
		}
	}
	applied, err := client.Apply(ctx, name, o.Object.Object, metav1.ApplyOptions{FieldManager: FieldManager, Force: true, DryRun: []string{metav1.DryRunAll}})
	switch {
	case err == nil:
		drift.Wanted, err = comparable(applied)
	case drift.Live == nil && apierrors.IsNotFound(err):
		// Its namespace or its kind is yet to come with the manifests.
		drift.Wanted, err = comparable(o.Object.Object)
	default:
		return nil, fmt.Errorf("dry-run apply %s (%s): %w", o.Object, o.Source(), err)
	}
	if err != nil || string(drift.Live) == string(drift.Wanted) {
		return nil, err
	}
	return drift, nil
}

// driftOf dry-runs the apply of obj over have, its live object read
// before, and returns what it would change, or nil when it would change
// nothing.
func driftOf[T metav1.Object](ctx context.Context, c applyClient[T], obj T, have live[T], mustReplace func(have T) bool) (*Drift, error) {
	kind, name := kindOf(obj), obj.GetName()
	drift := &Drift{Object: kind + " " + qualifiedName(obj)}
	var err error
	if have.found {
		if drift.Live, err = comparable(have.obj); err != nil {
			return nil, err
		}
	}
	if drift.Live != nil && mustReplace != nil && mustReplace(have.obj) {
		// The dry run of an apply over the old object would fail on the
		// field that forces the replacement: show the object as built.
		drift.Replace = true
		drift.Wanted, err = comparable(obj)
		return drift, err
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encode %s %q: %w", kind, name, err)
	}
	force := true
	applied, err := c.Patch(ctx, name, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: FieldManager, Force: &force, DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return nil, fmt.Errorf("dry-run apply %s %q: %w", kind, name, err)
	}
	if drift.Wanted, err = comparable(applied); err != nil {
		return nil, err
	}
	if string(drift.Live) == string(drift.Wanted) {
		return nil, nil
	}
	return drift, nil
}

// comparable renders obj as YAML without what the API server or the
// controllers change on their own, and without the type: the status and the bookkeeping
// metadata (resourceVersion, generation, managedFields, uid, creation
// time) and the revision annotation of a Deployment's controller.
func comparable(obj any) ([]byte, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var fields map[string]any
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, err
	}
	// Typed clients return no apiVersion and kind; the objects kubeboot
	// builds carry them.
	for _, key := range []string{"status", "apiVersion", "kind"} {
		delete(fields, key)
	}
	if meta, ok := fields["metadata"].(map[string]any); ok {
		for _, key := range []string{"resourceVersion", "generation", "managedFields", "uid", "creationTimestamp"} {
			delete(meta, key)
		}
		if annotations, ok := meta["annotations"].(map[string]any); ok {
			delete(annotations, "deployment.kubernetes.io/revision")
			if len(annotations) == 0 {
				delete(meta, "annotations")
			}
		}
	}
	return yaml.Marshal(fields)
}
