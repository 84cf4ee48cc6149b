package netpol

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Options tune a Controller.
type Options struct {
	// Settle is how long the controller waits after a change for the
	// ones that come with it (a Deployment's pods), before it computes.
	Settle time.Duration
	// Resync is how often it applies the verdicts even without a change,
	// taking back a table someone else changed or deleted.
	Resync time.Duration
	// Log receives one line per table applied.
	Log func(string)
}

// Controller enforces the cluster's NetworkPolicy on one node: it
// watches pods, namespaces and policies, and after each change applies
// the node's verdicts through its apply function (Apply, on the node).
type Controller struct {
	client kubernetes.Interface
	node   string
	apply  func([]Verdicts) error
	opts   Options
}

// New is the Controller of node.
func New(client kubernetes.Interface, node string, apply func([]Verdicts) error, opts Options) *Controller {
	return &Controller{client: client, node: node, apply: apply, opts: opts}
}

// Run watches the cluster and applies the verdicts, once the watches
// have synced and after every change that alters them, until ctx ends.
// A failed apply is retried at the next change or resync; it ends Run
// only before the first apply succeeded, so a node that cannot enforce
// says so at once.
func (c *Controller) Run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactory(c.client, 0)
	pods := factory.Core().V1().Pods()
	namespaces := factory.Core().V1().Namespaces()
	policies := factory.Networking().V1().NetworkPolicies()
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}
	for _, i := range []cache.SharedIndexInformer{pods.Informer(), namespaces.Informer(), policies.Informer()} {
		if _, err := i.AddEventHandler(handler); err != nil {
			return err
		}
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), pods.Informer().HasSynced, namespaces.Informer().HasSynced, policies.Informer().HasSynced) {
		return fmt.Errorf("watch pods, namespaces and network policies: %w", cmp.Or(ctx.Err(), errors.New("not synced")))
	}
	resync := time.NewTicker(c.opts.Resync)
	defer resync.Stop()
	var last []Verdicts
	applied := false
	for {
		force := false
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-resync.C:
			force = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(c.opts.Settle):
		}
		cluster, err := snapshot(pods.Lister().List, namespaces.Lister().List, policies.Lister().List)
		if err != nil {
			return err
		}
		verdicts := Compute(cluster, c.node)
		if applied && !force && reflect.DeepEqual(verdicts, last) {
			continue
		}
		if err := c.apply(verdicts); err != nil {
			if !applied {
				return err
			}
			c.opts.Log(fmt.Sprintf("apply the verdicts: %v (again at the next change, or within %s)", err, c.opts.Resync))
			continue
		}
		if !applied || !reflect.DeepEqual(verdicts, last) {
			c.opts.Log(fmt.Sprintf("table inet %s: %d of this node's pods isolated by %d policies", TableName, len(verdicts), len(cluster.Policies)))
		}
		last, applied = verdicts, true
	}
}

// snapshot is the cluster as the watches hold it, in a stable order, so
// that the same cluster computes the same verdicts.
func snapshot(
	listPods func(labels.Selector) ([]*corev1.Pod, error),
	listNamespaces func(labels.Selector) ([]*corev1.Namespace, error),
	listPolicies func(labels.Selector) ([]*networkingv1.NetworkPolicy, error),
) (Cluster, error) {
	var c Cluster
	pods, err := listPods(labels.Everything())
	if err != nil {
		return c, err
	}
	for _, p := range pods {
		if pod, ok := PodOf(p); ok {
			c.Pods = append(c.Pods, pod)
		}
	}
	slices.SortFunc(c.Pods, func(a, b Pod) int { return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name)) })
	namespaces, err := listNamespaces(labels.Everything())
	if err != nil {
		return c, err
	}
	for _, n := range namespaces {
		c.Namespaces = append(c.Namespaces, *n)
	}
	policies, err := listPolicies(labels.Everything())
	if err != nil {
		return c, err
	}
	for _, p := range policies {
		c.Policies = append(c.Policies, *p)
	}
	slices.SortFunc(c.Policies, func(a, b networkingv1.NetworkPolicy) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return c, nil
}
