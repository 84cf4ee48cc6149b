package csrapprover

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// logLines collects a controller's log.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// waitFor waits until the log holds want: a decision is logged after its
// update returns.
func (l *logLines) waitFor(t *testing.T, want string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(l.String(), want), nil
	})
	if err != nil {
		t.Errorf("log lacks %q:\n%s", want, l)
	}
}

// startController runs a controller on client until the test ends, and
// waits until it is ready.
func startController(t *testing.T, client *fake.Clientset, log *logLines) {
	t.Helper()
	startControllerWith(t, client, Options{Log: log.add})
}

// startControllerWith is startController with the options given.
func startControllerWith(t *testing.T, client *fake.Clientset, opts Options) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := New(client, opts)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after its context was cancelled")
		}
	})
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return c.Ready(), nil
	}); err != nil {
		t.Fatalf("controller not ready: %v", err)
	}
}

// conditionsOf waits until the named CSR has want conditions and returns them.
func conditionsOf(t *testing.T, client *fake.Clientset, name string, want int) []certificatesv1.CertificateSigningRequestCondition {
	t.Helper()
	var conditions []certificatesv1.CertificateSigningRequestCondition
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		csr, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conditions = csr.Status.Conditions
		return len(conditions) >= want, nil
	})
	if err != nil {
		t.Fatalf("CSR %s: %v; conditions %+v", name, err, conditions)
	}
	return conditions
}

// clientCSR is a kube-apiserver-client CSR that the rule would deny, were
// it a kubelet-serving one.
func clientCSR(t *testing.T) *certificatesv1.CertificateSigningRequest {
	csr := servingCSR(t, "csr-client", subject{cn: "kubernetes-admin", orgs: []string{"system:masters"}})
	csr.Spec.SignerName = certificatesv1.KubeAPIServerClientSignerName
	csr.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth}
	return csr
}

// TestController runs the controller on a fake clientset: it decides the
// CSRs it lists at start and those it learns of through its watch, and
// leaves the CSRs of other signers alone.
func TestController(t *testing.T) {
	forgedSubject := honestSubject()
	forgedSubject.ips = append(forgedSubject.ips, "10.0.0.99")
	client := fake.NewClientset(w1(), servingCSR(t, "csr-listed", honestSubject()), clientCSR(t))
	log := &logLines{}
	startController(t, client, log)

	ctx := context.Background()
	for _, csr := range []*certificatesv1.CertificateSigningRequest{
		servingCSR(t, "csr-watched", honestSubject()),
		servingCSR(t, "csr-forged", forgedSubject),
	} {
		if _, err := client.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]certificatesv1.RequestConditionType{
		"csr-listed":  certificatesv1.CertificateApproved,
		"csr-watched": certificatesv1.CertificateApproved,
		"csr-forged":  certificatesv1.CertificateDenied,
	} {
		conditions := conditionsOf(t, client, name, 1)
		if len(conditions) != 1 || conditions[0].Type != want || conditions[0].Status != "True" {
			t.Errorf("%s: conditions %+v, want one %s", name, conditions, want)
		}
	}
	denied := conditionsOf(t, client, "csr-forged", 1)[0]
	if denied.Reason != ReasonSANNotNodeAddress || denied.Message != "SAN 10.0.0.99 is not an address of Node w1" {
		t.Errorf("csr-forged denied with %q: %q", denied.Reason, denied.Message)
	}
	// The decisions went out through the approval subresource; the client
	// CSR was never updated at all.
	for _, a := range client.Actions() {
		if a.GetVerb() == "update" && a.GetResource().Resource == "certificatesigningrequests" {
			u := a.(k8stesting.UpdateAction)
			if u.GetSubresource() != "approval" {
				t.Errorf("update of subresource %q, want approval", u.GetSubresource())
			}
			if name := u.GetObject().(*certificatesv1.CertificateSigningRequest).Name; name == "csr-client" {
				t.Errorf("the kube-apiserver-client CSR was updated")
			}
		}
	}
	if conditions := conditionsOf(t, client, "csr-client", 0); len(conditions) != 0 {
		t.Errorf("csr-client: conditions %+v, want none", conditions)
	}
	log.waitFor(t, "approved CSR csr-listed requested by system:node:w1: "+ReasonApproved)
	log.waitFor(t, "denied CSR csr-forged requested by system:node:w1: SANNotNodeAddress: SAN 10.0.0.99 is not an address of Node w1")
	if got := log.String(); strings.Contains(got, "BEGIN") || strings.Contains(got, "csr-client") {
		t.Errorf("log holds key material or the client CSR:\n%s", got)
	}
}

// TestControllerMissingNode denies a CSR whose Node does not exist: the
// Node is read from the API server, not guessed.
func TestControllerMissingNode(t *testing.T) {
	client := fake.NewClientset(servingCSR(t, "csr-1", honestSubject()))
	startController(t, client, &logLines{})
	c := conditionsOf(t, client, "csr-1", 1)[0]
	if c.Type != certificatesv1.CertificateDenied || c.Message != "Node w1 not found" {
		t.Errorf("condition %+v, want a denial naming the missing Node", c)
	}
}

// TestControllerAnotherApproverFirst makes the approval lose to another
// approver, as with two control-plane nodes: the API server refuses the
// second update with a conflict, and the controller finds the CSR decided
// and leaves it with the one condition.
func TestControllerAnotherApproverFirst(t *testing.T) {
	client := fake.NewClientset(w1(), servingCSR(t, "csr-1", honestSubject()))
	var once sync.Once
	client.PrependReactor("update", "certificatesigningrequests", func(action k8stesting.Action) (bool, runtime.Object, error) {
		handled := false
		var err error
		once.Do(func() {
			other := action.(k8stesting.UpdateAction).GetObject().(*certificatesv1.CertificateSigningRequest).DeepCopy()
			other.Status.Conditions[0].Message = "the other approver"
			if err = client.Tracker().Update(action.GetResource(), other, ""); err == nil {
				err = apierrors.NewConflict(action.GetResource().GroupResource(), other.Name, nil)
			}
			handled = true
		})
		return handled, nil, err
	})
	log := &logLines{}
	startController(t, client, log)
	log.waitFor(t, "left CSR csr-1 requested by system:node:w1: decided meanwhile")
	conditions := conditionsOf(t, client, "csr-1", 1)
	if len(conditions) != 1 || conditions[0].Message != "the other approver" {
		t.Errorf("conditions %+v, want the other approver's only", conditions)
	}
	if strings.Contains(log.String(), "approved") {
		t.Errorf("logged an approval that did not happen:\n%s", log)
	}
}

func TestHandler(t *testing.T) {
	c := New(fake.NewClientset(), Options{})
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before the list: %d %s", code, body)
	}
	c.ready.Store(true)
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz once ready: %d", code)
	}
}

// TestControllerWaitsForAccess starts the approver as a control plane
// coming up does: its lists of CSRs refused (no API server yet, then no
// rights until init grants them), five times. It asks again every
// AccessPoll, so it approves the CSR as soon as the lists pass; an
// informer started at once would back off from those failures for 24.8 s
// or more (0.8 s, doubling), beyond the test's 10 s waits. Each kind of
// failure is logged once.
func TestControllerWaitsForAccess(t *testing.T) {
	client := fake.NewClientset(w1(), servingCSR(t, "csr-1", honestSubject()))
	refused := 0
	var mu sync.Mutex
	client.PrependReactor("list", "certificatesigningrequests", func(action k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		switch refused++; {
		case refused <= 2:
			return true, nil, errors.New("dial tcp 10.0.0.10:6443: connect: connection refused")
		case refused <= 5:
			return true, nil, apierrors.NewForbidden(action.GetResource().GroupResource(), "", errors.New("no rights yet"))
		}
		return false, nil, nil
	})
	log := &logLines{}
	startControllerWith(t, client, Options{Log: log.add, AccessPoll: 10 * time.Millisecond})
	if c := conditionsOf(t, client, "csr-1", 1)[0]; c.Type != certificatesv1.CertificateApproved {
		t.Errorf("condition %+v, want an approval", c)
	}
	log.waitFor(t, "listed CertificateSigningRequests: deciding them")
	got := log.String()
	for _, want := range []string{"connection refused", "forbidden"} {
		if n := strings.Count(got, "cannot list CertificateSigningRequests yet: "); n != 2 || !strings.Contains(got, want) {
			t.Errorf("log has %d lines on refused lists, want 2, one naming %q:\n%s", n, want, got)
		}
	}
}
