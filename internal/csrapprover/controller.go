package csrapprover

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certificateslisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// FieldManager names the approver in the managedFields of the CSRs it
// approves or denies.
const FieldManager = "kubeboot-csr-approver"

// DefaultResync is how often the informer hands every cached CSR to the
// controller again, so that one whose decision failed past its retries is
// decided still.
const DefaultResync = 10 * time.Minute

// workers decide CSRs concurrently; a node's CSRs come rarely, but one
// slow Node read should not hold up the others.
const workers = 2

// DefaultAccessPoll is how often Run asks again for the list of CSRs
// until the API server answers it (see Run).
const DefaultAccessPoll = 250 * time.Millisecond

// Options tune a Controller.
type Options struct {
	// Log receives one line per decision and per failed attempt; nil
	// discards them. No line holds key material.
	Log func(line string)
	// Resync is DefaultResync when 0.
	Resync time.Duration
	// AccessPoll is DefaultAccessPoll when 0.
	AccessPoll time.Duration
}

// Controller decides every undecided kubernetes.io/kubelet-serving CSR, and
// every kubelet client CSR of a node-bound token, by Decide, through the
// approval subresource. It needs no leader election:
// the rule is a function of the CSR and its Node, so two approvers reach
// the same decision, and an update of the approval carries the
// resourceVersion read, so of two concurrent ones the API server takes the
// first and refuses the second with a conflict; the loser then finds the
// CSR decided and leaves it.
type Controller struct {
	client kubernetes.Interface
	opts   Options
	ready  atomic.Bool
}

// New returns a controller that talks to the API server through client.
func New(client kubernetes.Interface, opts Options) *Controller {
	if opts.Resync <= 0 {
		opts.Resync = DefaultResync
	}
	if opts.AccessPoll <= 0 {
		opts.AccessPoll = DefaultAccessPoll
	}
	if opts.Log == nil {
		opts.Log = func(string) {}
	}
	return &Controller{client: client, opts: opts}
}

// Ready says whether the controller has listed the CSRs and is deciding
// them.
func (c *Controller) Ready() bool { return c.ready.Load() }

// Run lists and watches the kubelet-serving CSRs and decides each until ctx
// is done; it returns nil then. Only the CSRs of that signer are listed
// (a field selector), and the Node of each is read from the API server
// rather than a cache when it is decided, since a denial is final and a
// Node's addresses may have changed just before its kubelet asked.
//
// The approver starts with the control plane, before its API server
// serves and before init grants the approver its rights: an informer
// started then backs off from its failed lists (0.8 s, doubling, up to
// 30 s), and came seconds late to the CSR of a worker booting with the
// cluster. So Run first lists one CSR every AccessPoll until the API
// server answers, and only then starts the informer.
func (c *Controller) Run(ctx context.Context) error {
	if !c.waitForAccess(ctx) {
		return nil // ctx is done
	}
	// Every CSR is watched, a cluster has few: a field selector takes one
	// signer, and the approver decides two.
	factory := informers.NewSharedInformerFactory(c.client, c.opts.Resync)
	csrs := factory.Certificates().V1().CertificateSigningRequests()
	informer := csrs.Informer()
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "csr-approver"})
	enqueue := func(obj any) {
		if csr, ok := obj.(*certificatesv1.CertificateSigningRequest); ok && Decide(csr, nil).Verdict != Ignore {
			queue.Add(csr.Name)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return fmt.Errorf("watch CertificateSigningRequests: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil // ctx is done
	}
	c.ready.Store(true)
	defer c.ready.Store(false)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for c.next(ctx, queue, csrs.Lister()) {
			}
		})
	}
	<-ctx.Done()
	queue.ShutDown()
	wg.Wait()
	return nil
}

// waitForAccess lists one CSR every AccessPoll until the API server
// answers; false when ctx is done first. It logs the first failure, each
// that fails otherwise than the one before (connection refused, then
// forbidden until init grants the approver its rights), and the list that
// passes after them.
func (c *Controller) waitForAccess(ctx context.Context) bool {
	api := c.client.CertificatesV1().CertificateSigningRequests()
	logged := ""
	err := wait.PollUntilContextCancel(ctx, c.opts.AccessPoll, true, func(ctx context.Context) (bool, error) {
		_, err := api.List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			if logged != "" {
				c.opts.Log("listed CertificateSigningRequests: deciding them")
			}
			return true, nil
		}
		if msg := err.Error(); msg != logged && ctx.Err() == nil {
			c.opts.Log(fmt.Sprintf("cannot list CertificateSigningRequests yet: %s (asking again every %s)", msg, c.opts.AccessPoll))
			logged = msg
		}
		return false, nil
	})
	return err == nil
}

// next decides the next queued CSR; false once the queue is shut down.
func (c *Controller) next(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], lister certificateslisters.CertificateSigningRequestLister) bool {
	name, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(name)
	if err := c.decide(ctx, lister, name); err != nil {
		if ctx.Err() == nil {
			c.opts.Log(fmt.Sprintf("CSR %s: %v (retrying)", name, err))
		}
		queue.AddRateLimited(name)
		return true
	}
	queue.Forget(name)
	return true
}

// decide applies the rule to the CSR called name, as the cache has it.
func (c *Controller) decide(ctx context.Context, lister certificateslisters.CertificateSigningRequestLister, name string) error {
	csr, err := lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get CertificateSigningRequest %q: %w", name, err)
	}
	// The Node is read from the API server, not a cache: a node-bound
	// token's CSR is approved only while its Node does not exist.
	var node *corev1.Node
	if name := Node(csr); name != "" && !decided(csr) {
		node, err = c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			node = nil
		case err != nil:
			return fmt.Errorf("get Node %q: %w", name, err)
		}
	}
	d := Decide(csr, node)
	if d.Verdict == Ignore {
		return nil
	}
	return c.record(ctx, csr, d)
}

// record adds the decision's condition through the approval subresource.
// The update carries the resourceVersion the cache read, so it fails with
// a conflict when the CSR changed meanwhile, as when another approver
// decided it first: then the CSR is left as it is, and otherwise retried.
func (c *Controller) record(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, d Decision) error {
	condition := certificatesv1.CertificateSigningRequestCondition{
		Type:           certificatesv1.CertificateApproved,
		Status:         corev1.ConditionTrue,
		Reason:         d.Reason,
		Message:        d.Message,
		LastUpdateTime: metav1.Now(),
	}
	verb := "approved"
	if d.Verdict == Deny {
		condition.Type, verb = certificatesv1.CertificateDenied, "denied"
	}
	update := csr.DeepCopy()
	update.Status.Conditions = append(update.Status.Conditions, condition)
	api := c.client.CertificatesV1().CertificateSigningRequests()
	_, err := api.UpdateApproval(ctx, csr.Name, update, metav1.UpdateOptions{FieldManager: FieldManager})
	if apierrors.IsConflict(err) {
		// The cache may lag behind the change that caused the conflict:
		// ask the API server whether the CSR is decided now.
		if fresh, gerr := api.Get(ctx, csr.Name, metav1.GetOptions{}); gerr == nil && decided(fresh) {
			c.opts.Log(fmt.Sprintf("left CSR %s requested by %s: decided meanwhile, by another approver or a person", csr.Name, csr.Spec.Username))
			return nil
		}
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("update approval of CertificateSigningRequest %q: %w", csr.Name, err)
	}
	c.opts.Log(fmt.Sprintf("%s CSR %s requested by %s: %s: %s", verb, csr.Name, csr.Spec.Username, d.Reason, d.Message))
	return nil
}

// Handler serves the controller's health to the kubelet's probes: /healthz
// answers ok while the process serves, /readyz once Ready. Neither needs
// the API server, so a control plane that is still coming up does not get
// the approver restarted.
func (c *Controller) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !c.Ready() {
			http.Error(w, "not ready: CertificateSigningRequests not listed yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	return mux
}
