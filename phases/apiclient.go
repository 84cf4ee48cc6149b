package phases

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/templates"
)

// FieldManager names kubeboot in the managedFields of the objects it
// applies, so that the API server can tell kubeboot's fields from those of
// controllers, such as the bootstrapsigner's keys in cluster-info.
const FieldManager = "kubeboot"

// Client is the API client NewClient builds: the typed clientset, and the
// dynamic client of the same configuration, which applies the user's own
// manifests (addons.manifests), of kinds kubeboot does not know. Tests hand
// Run.API one of fakes.
type Client struct {
	kubernetes.Interface
	// Dynamic reads and applies objects of any kind.
	Dynamic dynamic.Interface
}

// NewClient builds an API client, a *Client, from a kubeconfig; a
// non-empty server replaces the kubeconfig's.
func NewClient(kubeconfig []byte, server string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	if server != "" {
		cfg.Host = server
	}
	cfg.UserAgent = FieldManager
	cfg.QPS, cfg.Burst = clientQPS, clientBurst
	// One HTTP client, so both share the connections.
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	typed, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	return &Client{Interface: typed, Dynamic: dyn}, nil
}

// DynamicClient returns the dynamic client of the run's API client (see
// APIClient), which NewClient built beside the typed one.
func DynamicClient(s *Node) (dynamic.Interface, error) {
	client, err := APIClient(s)
	if err != nil {
		return nil, err
	}
	if c, ok := client.(*Client); ok && c.Dynamic != nil {
		return c.Dynamic, nil
	}
	return nil, errors.New("the run's API client has no dynamic client, which addons.manifests needs (a bug: the API client comes from phases.NewClient)")
}

// clientQPS and clientBurst bound kubeboot's requests to the API server.
// init sends about a hundred in a burst, once; at client-go's default of
// 5 per second after a burst of 10, they waited about 5 s of init's
// bring-up (make bench). The API server's priority and fairness, not the
// client, protects the server.
const (
	clientQPS   = 200
	clientBurst = 400
)

// APIClient returns the run's API client, built on first use from
// super-admin.conf, whose system:masters identity needs no RBAC grant: the
// live phases run before or right after bootstrap-admin grants admin.conf
// its role.
func APIClient(s *Node) (kubernetes.Interface, error) {
	if s.API != nil {
		return s.API, nil
	}
	path := s.Config.KubeconfigPath(config.KubeconfigSuperAdmin)
	kubeconfig, err := s.Files.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %q (run `kubeboot init phase kubeconfig` first): %w", path, err)
	}
	server := ""
	if s.Config.ControlPlaneEndpoint != "" {
		// The wait phase saw this node's API server healthy; a load
		// balancer in front of it may not have noticed yet (the first
		// node of a cluster is its only backend), so talk to it directly.
		server = s.Config.LocalAPIEndpoint()
	}
	client, err := NewClient(kubeconfig, server)
	if err != nil {
		return nil, fmt.Errorf("load %q: %w", path, err)
	}
	s.API = client
	return client, nil
}

// applyClient is what apply needs of a typed client, such as
// CoreV1().ConfigMaps(ns).
type applyClient[T metav1.Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// apply converges obj by server-side apply, as FieldManager and forcing
// its ownership of the fields obj sets: kubeboot owns these objects. It
// reads the live object first (see applyOver).
func apply[T metav1.Object](ctx context.Context, c applyClient[T], obj T, mustReplace func(have T) bool) (string, error) {
	have, err := readLive(ctx, c, obj)
	if err != nil {
		return "", err
	}
	verb, _, err := applyOver(ctx, c, obj, have, mustReplace, nil)
	return verb, err
}

// live is an object as the API server has it, read before an apply.
type live[T metav1.Object] struct {
	// obj is the object; unset when found is false.
	obj T
	// found says whether the object exists.
	found bool
}

// readLive reads obj's live object; a missing one is no error. It reads
// from the API server's watch cache (resourceVersion 0), which answers at
// once, where a read of the latest makes etcd confirm its leader first:
// twenty of those at once took 20 ms of a converged upgrade apply. The
// cache trails etcd by milliseconds; what the read decides (whether to
// send the apply, whether to replace the object) is what a read of the
// latest would have decided just before a write that came after it.
func readLive[T metav1.Object](ctx context.Context, c applyClient[T], obj T) (live[T], error) {
	have, err := c.Get(ctx, obj.GetName(), metav1.GetOptions{ResourceVersion: "0"})
	switch {
	case apierrors.IsNotFound(err):
		return live[T]{}, nil
	case err != nil:
		return live[T]{}, fmt.Errorf("get %s %q: %w", kindOf(obj), obj.GetName(), err)
	}
	return live[T]{obj: have, found: true}, nil
}

// applyOver applies obj over have, its live object read before. The API
// server stores nothing when the apply changes nothing, so the verb it
// returns, "created", "updated" or "unchanged", comes from comparing
// resourceVersions. When mustReplace says the live object differs in a
// field the API server will not change (a binding's roleRef), the object
// is deleted and created again: "replaced". With a record (see
// applyRecord), an apply the record shows would change nothing is not
// sent, and each apply sent is recorded. It also returns the object as
// the API server has it after the apply: the one it returned, or the
// live one when the apply was not sent.
func applyOver[T metav1.Object](ctx context.Context, c applyClient[T], obj T, have live[T], mustReplace func(have T) bool, record *applyRecord) (string, T, error) {
	var none T
	kind, name := kindOf(obj), obj.GetName()
	data, err := json.Marshal(obj)
	if err != nil {
		return "", none, fmt.Errorf("encode %s %q: %w", kind, name, err)
	}
	key := kind + " " + qualifiedName(obj)
	verb := "created"
	switch {
	case !have.found:
	case mustReplace != nil && mustReplace(have.obj):
		if err := c.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptrTo(have.obj.GetUID())}}); err != nil {
			return "", none, fmt.Errorf("delete %s %q to replace it: %w", kind, name, err)
		}
		verb = "replaced"
	case record != nil && record.unchanged(key, data, have.obj):
		return "unchanged", have.obj, nil
	default:
		verb = "unchanged"
	}
	force := true
	applied, err := c.Patch(ctx, name, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: FieldManager, Force: &force})
	if err != nil {
		return "", none, fmt.Errorf("apply %s %q: %w", kind, name, err)
	}
	if record != nil {
		record.set(key, data, applied)
	}
	if verb == "unchanged" && applied.GetResourceVersion() != have.obj.GetResourceVersion() {
		verb = "updated"
	}
	return verb, applied, nil
}

func ptrTo[T any](v T) *T { return &v }

// kindOf is an object's kind, from the TypeMeta every builder sets.
func kindOf(obj any) string {
	if o, ok := obj.(runtime.Object); ok {
		if kind := o.GetObjectKind().GroupVersionKind().Kind; kind != "" {
			return kind
		}
	}
	return fmt.Sprintf("%T", obj)
}

// applyObjects applies objs, each binding after its role and each
// workload after what it uses (see applyRun.all), and reports what
// happened to each.
func applyObjects(ctx context.Context, s *Node, client kubernetes.Interface, objs templates.Objects) error {
	return applyObjectsSeen(ctx, s, client, objs, nil)
}

// applyObjectsSeen is applyObjects that also keeps, in workloads, each
// Deployment and DaemonSet as the API server has it after its apply.
func applyObjectsSeen(ctx context.Context, s *Node, client kubernetes.Interface, objs templates.Objects, workloads *Workloads) error {
	record := loadApplyRecord(s)
	err := applyRun{s: s, record: record, workloads: workloads}.all(ctx, client, objs)
	return errors.Join(err, record.save(s))
}

// applyRun is one pass over a set of objects: a real apply, reported, or,
// when drifts is set, a server-side dry run that records each object the
// apply would change.
type applyRun struct {
	s      *Node
	drifts *[]Drift
	// record, for a real apply, spares the applies that would change
	// nothing (see applyRecord).
	record *applyRecord
	// workloads, when set, keeps the workloads a real apply leaves.
	workloads *Workloads
}

// all applies objs in three waves, each after the one before: the objects
// that refer to none of the others (ServiceAccounts, ConfigMaps, Roles,
// ClusterRoles, Services), then the bindings, then the workloads, so that
// no workload's pod starts without its account's rights. Every object
// costs two round trips to the API server, a get and then the apply, or
// the get alone when the record shows the apply would change nothing
// (see applyRecord): the gets of all three waves go first, at once, and
// within a wave every
// object is applied at once (the API server commits concurrent writes to
// etcd together). What each wave did is reported, and its drifts
// recorded, in the order of templates.Objects.
func (r applyRun) all(ctx context.Context, client kubernetes.Interface, objs templates.Objects) error {
	core, rbac, apps := client.CoreV1(), client.RbacV1(), client.AppsV1()
	waves := [][]task{
		slices.Concat(
			tasksOf(r, objs.ServiceAccounts, func(ns string) applyClient[*corev1.ServiceAccount] { return core.ServiceAccounts(ns) }, nil),
			tasksOf(r, objs.ConfigMaps, func(ns string) applyClient[*corev1.ConfigMap] { return core.ConfigMaps(ns) }, nil),
			tasksOf(r, objs.Roles, func(ns string) applyClient[*rbacv1.Role] { return rbac.Roles(ns) }, nil),
			tasksOf(r, objs.ClusterRoles, func(string) applyClient[*rbacv1.ClusterRole] { return rbac.ClusterRoles() }, nil),
			tasksOf(r, objs.Services, func(ns string) applyClient[*corev1.Service] { return core.Services(ns) },
				func(have, want *corev1.Service) bool { return have.Spec.ClusterIP != want.Spec.ClusterIP }),
		),
		slices.Concat(
			tasksOf(r, objs.RoleBindings, func(ns string) applyClient[*rbacv1.RoleBinding] { return rbac.RoleBindings(ns) },
				func(have, want *rbacv1.RoleBinding) bool { return have.RoleRef != want.RoleRef }),
			tasksOf(r, objs.ClusterRoleBindings, func(string) applyClient[*rbacv1.ClusterRoleBinding] { return rbac.ClusterRoleBindings() },
				func(have, want *rbacv1.ClusterRoleBinding) bool { return have.RoleRef != want.RoleRef }),
		),
		slices.Concat(
			tasksOf(r, objs.Deployments, func(ns string) applyClient[*appsv1.Deployment] { return apps.Deployments(ns) },
				func(have, want *appsv1.Deployment) bool {
					return !equality.Semantic.DeepEqual(have.Spec.Selector, want.Spec.Selector)
				}),
			tasksOf(r, objs.DaemonSets, func(ns string) applyClient[*appsv1.DaemonSet] { return apps.DaemonSets(ns) },
				func(have, want *appsv1.DaemonSet) bool {
					return !equality.Semantic.DeepEqual(have.Spec.Selector, want.Spec.Selector)
				}),
		),
	}
	if err := readAll(ctx, slices.Concat(waves...)); err != nil {
		return err
	}
	for _, wave := range waves {
		if err := r.atOnce(ctx, wave); err != nil {
			return err
		}
	}
	return nil
}

// task is one object's part of an applyRun: read reads its live object,
// then apply applies it over that, or dry-runs the apply, and returns the
// line to report or the object's drift (nil when there is none).
type task struct {
	read  func(ctx context.Context) error
	apply func(ctx context.Context) (line string, drift *Drift, err error)
}

// tasksOf are the tasks of objs, each through the client of its
// namespace, replacing an object when mustReplace says a field the API
// server will not change differs (a binding's roleRef, a Service's
// cluster IP, a workload's selector).
func tasksOf[T metav1.Object](r applyRun, objs []T, client func(namespace string) applyClient[T], mustReplace func(have, want T) bool) []task {
	var tasks []task
	for _, o := range objs {
		var replace func(T) bool
		if mustReplace != nil {
			replace = func(have T) bool { return mustReplace(have, o) }
		}
		c := client(o.GetNamespace())
		var have live[T]
		read := func(ctx context.Context) (err error) {
			have, err = readLive(ctx, c, o)
			return err
		}
		if r.drifts != nil {
			tasks = append(tasks, task{read: read, apply: func(ctx context.Context) (string, *Drift, error) {
				drift, err := driftOf(ctx, c, o, have, replace)
				return "", drift, err
			}})
			continue
		}
		tasks = append(tasks, task{read: read, apply: func(ctx context.Context) (string, *Drift, error) {
			verb, after, err := applyOver(ctx, c, o, have, replace, r.record)
			if err != nil {
				return "", nil, err
			}
			r.workloads.keep(after)
			return fmt.Sprintf("%s %s %s", kindOf(o), qualifiedName(o), verb), nil, nil
		}})
	}
	return tasks
}

// readAll reads every task's live object at once. It returns every
// task's error, joined.
func readAll(ctx context.Context, tasks []task) error {
	errs := make([]error, len(tasks))
	var wg sync.WaitGroup
	for i, t := range tasks {
		wg.Go(func() { errs[i] = t.read(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// atOnce applies tasks concurrently and, once all have returned, reports
// their lines and records their drifts in the tasks' order. It returns
// every task's error, joined.
func (r applyRun) atOnce(ctx context.Context, tasks []task) error {
	type result struct {
		line  string
		drift *Drift
		err   error
	}
	results := make([]result, len(tasks))
	var wg sync.WaitGroup
	for i, t := range tasks {
		wg.Go(func() {
			line, drift, err := t.apply(ctx)
			results[i] = result{line, drift, err}
		})
	}
	wg.Wait()
	var errs []error
	for _, res := range results {
		switch {
		case res.err != nil:
			errs = append(errs, res.err)
		case res.drift != nil:
			*r.drifts = append(*r.drifts, *res.drift)
		case res.line != "":
			r.s.Report.Infof("%s", res.line)
		}
	}
	return errors.Join(errs...)
}

// qualifiedName is namespace/name, or name for a cluster-wide object.
func qualifiedName(o metav1.Object) string {
	if ns := o.GetNamespace(); ns != "" {
		return ns + "/" + o.GetName()
	}
	return o.GetName()
}
