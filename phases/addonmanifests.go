package phases

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/kubeboot/kubeboot/internal/addonmanifests"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/workflow"
)

// AddonManifests applies the user's own manifests (addons.manifests), as
// k3s's manifests directory and Talos's extraManifests do: every object by
// server-side apply as FieldManager, forcing its fields, the Namespaces and
// CustomResourceDefinitions first (and the latter established), then the
// rest in the manifests' order. Everything is read and checked against
// the cluster's kinds and namespaces before the first object is applied
// (addonmanifests.Read, addonmanifests.Resolve): a bad file applies nothing. A
// re-run changes no object that nobody else changed.
var AddonManifests = workflow.Phase[*Node]{
	Name:     "addon/manifests",
	Short:    "Apply your own manifests (addons.manifests) by server-side apply",
	LiveOnly: true,
	Run: func(ctx context.Context, s *Node) error {
		if len(s.Config.Addons.Manifests) == 0 {
			s.Report.Infof("addons.manifests lists no file: nothing to apply")
			return nil
		}
		plan, dyn, err := planManifests(ctx, s)
		switch {
		case err != nil:
			return err
		case dyn == nil:
			s.Report.Infof("the files of addons.manifests hold no object: nothing to apply")
			return nil
		}
		return applyPlan(ctx, s, dyn, plan)
	},
}

// CheckAddonManifests reads the user's manifests and settles, against the
// running cluster, where each goes, applying nothing: upgrade apply's
// preflight, so that a bad file or a missing namespace stops the upgrade
// before anything changes (init's preflight reads them; its cluster does
// not exist yet).
func CheckAddonManifests(ctx context.Context, s *Node) error {
	if len(s.Config.Addons.Manifests) == 0 {
		return nil
	}
	_, _, err := planManifests(ctx, s)
	return err
}

// The wait for the manifests' CustomResourceDefinitions: an API server
// establishes one within a second or two.
const (
	crdPollInterval     = 200 * time.Millisecond
	crdEstablishTimeout = time.Minute
)

// planManifests reads and checks the user's manifests and resolves them
// against the cluster, through its discovery (cached in memory for this
// run) and the dynamic client it returns. Without an object in
// addons.manifests it returns an empty plan, no client and no error,
// having built none.
func planManifests(ctx context.Context, s *Node) (addonmanifests.Plan, dynamic.Interface, error) {
	objs, err := addonmanifests.Read(s.Config.Addons.Manifests, s.Files.HostPath)
	if err != nil || len(objs) == 0 {
		return addonmanifests.Plan{}, nil, err
	}
	dyn, err := DynamicClient(s)
	if err != nil {
		return addonmanifests.Plan{}, nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(s.API.Discovery()))
	plan, err := addonmanifests.Resolve(objs, mapper, namespaceExists(ctx, dyn))
	if err != nil {
		return addonmanifests.Plan{}, nil, err
	}
	return plan, dyn, nil
}

// namespacesResource is the API resource of Namespaces.
var namespacesResource = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// namespaceExists asks the cluster whether a namespace exists.
func namespaceExists(ctx context.Context, dyn dynamic.Interface) addonmanifests.NamespaceExists {
	return func(name string) (bool, error) {
		_, err := dyn.Resource(namespacesResource).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		}
		return false, err
	}
}

// applyPlan applies the Namespaces and the CustomResourceDefinitions,
// waits until those are established, then applies the rest.
func applyPlan(ctx context.Context, s *Node, dyn dynamic.Interface, plan addonmanifests.Plan) error {
	for _, o := range slices.Concat(plan.Namespaces, plan.CRDs) {
		if err := applyManifest(ctx, s, dyn, o); err != nil {
			return err
		}
	}
	if err := waitEstablished(ctx, s, dyn, plan.CRDs); err != nil {
		return err
	}
	for _, o := range plan.Rest {
		if err := applyManifest(ctx, s, dyn, o); err != nil {
			return err
		}
	}
	return nil
}

// resourceOf is the dynamic client of o's resource, in o's namespace.
func resourceOf(dyn dynamic.Interface, o addonmanifests.Resolved) dynamic.ResourceInterface {
	if o.Namespaced {
		return dyn.Resource(o.Resource).Namespace(o.Object.Object.GetNamespace())
	}
	return dyn.Resource(o.Resource)
}

// applyManifest converges o by server-side apply, as apply does kubeboot's
// own objects, and reports whether it was created, updated or unchanged.
func applyManifest(ctx context.Context, s *Node, dyn dynamic.Interface, o addonmanifests.Resolved) error {
	client, name := resourceOf(dyn, o), o.Object.Object.GetName()
	verb := "created"
	have, err := client.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("get %s (%s): %w", o.Object, o.Source(), err)
	default:
		verb = "unchanged"
	}
	applied, err := client.Apply(ctx, name, o.Object.Object, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("apply %s (%s): %w", o.Object, o.Source(), err)
	}
	if verb == "unchanged" && applied.GetResourceVersion() != have.GetResourceVersion() {
		verb = "updated"
	}
	s.Report.Infof("%s %s", o.Object, verb)
	return nil
}

// waitEstablished waits until the API server serves the kinds of crds:
// each CustomResourceDefinition's Established condition is True. On
// timeout it names each one that is not, with its conditions' messages
// (a NamesAccepted False says which name conflicts).
func waitEstablished(ctx context.Context, s *Node, dyn dynamic.Interface, crds []addonmanifests.Resolved) error {
	if len(crds) == 0 {
		return nil
	}
	var pending []string
	check := func(ctx context.Context) (bool, error) {
		pending = nil
		for _, o := range crds {
			crd, err := resourceOf(dyn, o).Get(ctx, o.Object.Object.GetName(), metav1.GetOptions{})
			if err != nil {
				pending = append(pending, fmt.Sprintf("%s: %v", o.Object, err))
				continue
			}
			if why := notEstablished(crd); why != "" {
				pending = append(pending, fmt.Sprintf("%s: %s", o.Object, why))
			}
		}
		return len(pending) == 0, nil
	}
	err := wait.PollUntilContextTimeout(ctx, crdPollInterval, crdEstablishTimeout, true, check)
	if err != nil && len(pending) > 0 {
		return &exit.TimeoutError{Msg: fmt.Sprintf("%s: CustomResourceDefinitions not established within %s, so the objects of their kinds were not applied: %s",
			addonmanifests.Field, crdEstablishTimeout, strings.Join(pending, "; "))}
	}
	if err == nil {
		s.Report.Infof("%d CustomResourceDefinition(s) established", len(crds))
	}
	return err
}

// notEstablished says why crd is not established yet, or "" when it is.
func notEstablished(crd *unstructured.Unstructured) string {
	conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	var why []string
	for _, c := range conditions {
		cond, _ := c.(map[string]any)
		kind, _, _ := unstructured.NestedString(cond, "type")
		status, _, _ := unstructured.NestedString(cond, "status")
		if kind == "Established" && status == "True" {
			return ""
		}
		if status != "True" {
			msg, _, _ := unstructured.NestedString(cond, "message")
			why = append(why, fmt.Sprintf("%s %s: %s", kind, status, msg))
		}
	}
	if len(why) == 0 {
		return "not established yet"
	}
	return strings.Join(why, ", ")
}
