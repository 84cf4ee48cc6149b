package health

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/internal/config"
)

// httpsProbe is a probe of an HTTPS test server with the test PKI.
func httpsProbe(t testing.TB, p *testPKI, component, url string, paths ...string) Probe {
	t.Helper()
	probe, err := NewProbe(Target{Component: component, Endpoints: []string{url}, Paths: paths,
		CAFile: p.ca.file, CertFile: p.client.certFile, KeyFile: p.client.keyFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return probe
}

// flipping answers like an API server that turns ready once healthy is set.
func flipping(healthy *atomic.Bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" && !healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "[+]ping ok\n[-]etcd failed: reason withheld\nreadyz check failed\n")
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
}

func TestWaitBecomesHealthyLater(t *testing.T) {
	p := newPKI(t)
	var healthy atomic.Bool
	srv := serveTLS(t, flipping(&healthy), p.server.tls, p.ca)
	time.AfterFunc(300*time.Millisecond, func() { healthy.Store(true) })

	var changes []Change
	got, err := Wait(t.Context(), []Probe{httpsProbe(t, p, config.NameAPIServer, srv.URL, "/livez", "/readyz")},
		WaitOptions{Timeout: 10 * time.Second, OnChange: func(c Change) { changes = append(changes, c) }})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{config.NameAPIServer}, got); diff != "" {
		t.Errorf("healthy (-want +got):\n%s", diff)
	}
	type step struct {
		State  State
		Reason Reason
	}
	var steps []step
	for _, c := range changes {
		steps = append(steps, step{c.State, c.Reason})
	}
	want := []step{{StateWaiting, ""}, {StateUnhealthy, ReasonUnhealthy}, {StateHealthy, ""}}
	if diff := cmp.Diff(want, steps); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	last := changes[len(changes)-1]
	if last.Elapsed < 300*time.Millisecond || last.Elapsed > 2*time.Second {
		t.Errorf("healthy after %v, want shortly after 300ms", last.Elapsed)
	}
	if !strings.Contains(changes[1].Error, "/readyz: HTTP 500: failing checks: etcd") {
		t.Errorf("unhealthy change lacks the failing check: %+v", changes[1])
	}
}

func TestWaitTimeoutDiagnostics(t *testing.T) {
	p := newPKI(t)
	other := p.other.issue(t, p.dir, "other-server", "127.0.0.1")
	healthySrv := serveTLS(t, healthz, p.server.tls, nil)
	mismatched := serveTLS(t, healthz, other.tls, nil)
	refused := closedURL(t)
	probes := []Probe{
		httpsProbe(t, p, config.NameAPIServer, refused, "/livez", "/readyz"),
		httpsProbe(t, p, config.NameControllerManager, healthySrv.URL, "/healthz"),
		httpsProbe(t, p, config.NameScheduler, mismatched.URL, "/livez"),
	}
	start := time.Now()
	healthy, err := Wait(t.Context(), probes, WaitOptions{
		Timeout:      700 * time.Millisecond,
		ManifestsDir: "/etc/kubernetes/manifests",
		ForeignFiles: []string{"kube-apiserver.yaml.bak"},
	})
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Wait took %v with a 700ms timeout", took)
	}
	if diff := cmp.Diff([]string{config.NameControllerManager}, healthy); diff != "" {
		t.Errorf("healthy (-want +got):\n%s", diff)
	}
	var nh *NotHealthyError
	if !errors.As(err, &nh) {
		t.Fatalf("want *NotHealthyError, got %T %v", err, err)
	}
	var coded interface{ ExitCode() int }
	if !errors.As(err, &coded) || coded.ExitCode() != 4 {
		t.Errorf("want exit code 4, got %v", coded)
	}
	msg := err.Error()
	t.Log(msg)
	for _, want := range []string{
		"control plane not healthy after 700ms: kube-apiserver, kube-scheduler (healthy: kube-controller-manager)",
		"kube-apiserver: checked " + refused + "/livez, /readyz",
		"last error: " + refused + "/livez: connection refused",
		"likely cause: nothing listens on " + strings.TrimPrefix(refused, "https://"),
		"run: kubeboot validate /etc/kubernetes/manifests",
		"run: systemctl status kubelet",
		"run: crictl ps -a --name kube-apiserver",
		"kube-scheduler: checked " + mismatched.URL + "/livez",
		`issued by "CN=other-ca" for 127.0.0.1 is not signed by the CA in ` + p.ca.file,
		"likely cause: the server certificate and the CA " + p.ca.file + " do not match",
		"also: the kubelet runs these extra files in /etc/kubernetes/manifests: kube-apiserver.yaml.bak",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("diagnostic lacks %q", want)
		}
	}
	if strings.Contains(msg, "kube-controller-manager: checked") {
		t.Errorf("diagnostic explains a healthy component:\n%s", msg)
	}
}

func TestWaitCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	probe := Probe{Component: "c", Target: "t", Check: func(context.Context) error { return errors.New("down") }}
	_, err := Wait(ctx, []Probe{probe}, WaitOptions{Timeout: time.Minute})
	var nh *NotHealthyError
	if !errors.Is(err, context.Canceled) || errors.As(err, &nh) {
		t.Errorf("want a cancellation, got %T %v", err, err)
	}
}

func TestWaitNothing(t *testing.T) {
	healthy, err := Wait(t.Context(), nil, WaitOptions{})
	if healthy != nil || err != nil {
		t.Errorf("got %v, %v", healthy, err)
	}
}

// TestWaitStopsCheckingHealthy: a healthy component is checked once.
func TestWaitStopsCheckingHealthy(t *testing.T) {
	var healthyChecks, failing atomic.Int32
	probes := []Probe{
		{Component: "a", Check: func(context.Context) error { healthyChecks.Add(1); return nil }},
		{Component: "b", Check: func(context.Context) error {
			if failing.Add(1) < 10 {
				return errors.New("not yet")
			}
			return nil
		}},
	}
	if _, err := Wait(t.Context(), probes, WaitOptions{Timeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if n := healthyChecks.Load(); n != 1 {
		t.Errorf("healthy component checked %d times, want 1", n)
	}
}

func TestNextInterval(t *testing.T) {
	var got []time.Duration
	interval := firstInterval
	for range 6 {
		got = append(got, interval)
		interval = nextInterval(interval, time.Second)
	}
	want := []time.Duration{20 * time.Millisecond, 30 * time.Millisecond, 45 * time.Millisecond, 67500 * time.Microsecond, 100 * time.Millisecond, 100 * time.Millisecond}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fast schedule (-want +got):\n%s", diff)
	}
	if got := nextInterval(fastInterval, fastPeriod); got != 150*time.Millisecond {
		t.Errorf("after the fast period: %v, want growth to 150ms", got)
	}
	if got := nextInterval(slowInterval, time.Hour); got != slowInterval {
		t.Errorf("slow cap: %v", got)
	}
}

func TestChangeJSONAndString(t *testing.T) {
	c := Change{Component: "kube-apiserver", Target: "https://10.0.0.1:6443/livez, /readyz", State: StateUnhealthy,
		Elapsed: 3210 * time.Millisecond, Reason: ReasonRefused, Error: "refused"}
	raw, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"component":"kube-apiserver","target":"https://10.0.0.1:6443/livez, /readyz","state":"unhealthy","reason":"refused","error":"refused","elapsed":3.21}`
	if diff := cmp.Diff(want, string(raw)); diff != "" {
		t.Errorf("JSON (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		c    Change
		want string
	}{
		{c, "kube-apiserver: unhealthy after 3.2s: refused"},
		{Change{Component: "etcd", State: StateHealthy, Elapsed: 1250 * time.Millisecond}, "etcd: healthy after 1.3s"},
		{Change{Component: "etcd", State: StateWaiting, Target: "https://127.0.0.1:2379"}, "etcd: waiting for https://127.0.0.1:2379"},
	} {
		if got := tt.c.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}
