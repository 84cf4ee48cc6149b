package phases

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/kubeboot/kubeboot/templates"
)

// addonObjects are the default addons' objects: flannel with kubeboot's
// NetworkPolicy enforcer, CoreDNS and kube-proxy.
func addonObjects(tb testing.TB, s *Node) []templates.Objects {
	tb.Helper()
	s.Config.Networking.PodSubnet = "10.244.0.0/16"
	var all []templates.Objects
	for _, a := range []addon{podNetworkAddon, coreDNSAddon, kubeProxyAddon} {
		sets, err := a.build(s.Config, s.System.Kubeboot)
		if err != nil {
			tb.Fatal(err)
		}
		all = append(all, sets...)
	}
	return all
}

// TestApplyWaves: the objects a workload's pods need are in place before
// the workload is applied, each binding after the accounts and roles it
// names, and the report lists the objects in the same order, run after
// run, though each wave applies its objects at once. Every object is read
// before the first is applied: the reads of all waves go at once.
func TestApplyWaves(t *testing.T) {
	s, client, out := liveState(t, false)
	var mu sync.Mutex
	var applied []string
	readAfterApply := 0
	client.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		switch a.GetVerb() {
		case "patch":
			applied = append(applied, a.GetResource().Resource)
		case "get":
			if len(applied) > 0 {
				readAfterApply++
			}
		}
		return false, nil, nil
	})
	wave := map[string]int{"serviceaccounts": 0, "configmaps": 0, "roles": 0, "clusterroles": 0, "services": 0,
		"rolebindings": 1, "clusterrolebindings": 1, "deployments": 2, "daemonsets": 2}
	var reports []string
	for range 2 {
		applied = nil
		out.Reset()
		for _, objs := range addonObjects(t, s) {
			if err := applyObjects(t.Context(), s, client, objs); err != nil {
				t.Fatal(err)
			}
			last := -1
			for _, resource := range applied {
				w, ok := wave[resource]
				if !ok {
					t.Fatalf("applied %s, of no wave", resource)
				}
				if w < last {
					t.Errorf("applied %s (wave %d) after wave %d: %v", resource, w, last, applied)
				}
				last = w
			}
			applied = nil
		}
		reports = append(reports, out.String())
	}
	if readAfterApply > 0 {
		t.Errorf("%d objects were read after an object of the same set was applied; want every read first", readAfterApply)
	}
	if reports[0] == "" || strings.ReplaceAll(reports[0], "created", "unchanged") != reports[1] {
		t.Errorf("the second run's report is not the first's in the same order:\n%s\n---\n%s", reports[0], reports[1])
	}
}

// BenchmarkApplyAddons applies the default addons' objects to an API
// server that answers every request after 2 ms, as a real one on a
// loaded node does, and spends no time of its own: no object is there
// yet, and an apply returns what it was given. What it measures is the
// round trips a set costs: each wave's objects applied at once, and every
// object read before the first wave.
func BenchmarkApplyAddons(b *testing.B) {
	s, _, _ := liveState(b, false)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		time.Sleep(2 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
			return
		}
		_, _ = w.Write(body)
	}))
	defer api.Close()
	// No client-side rate limit: one run of kubeboot sends fewer requests
	// than NewClient's burst, but the benchmark's loop sends thousands,
	// and would measure the limiter instead of the round trips.
	client, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL, RateLimiter: flowcontrol.NewFakeAlwaysRateLimiter()})
	if err != nil {
		b.Fatal(err)
	}
	sets := addonObjects(b, s)
	ctx := context.Background()
	for b.Loop() {
		for _, objs := range sets {
			if err := applyObjects(ctx, s, client, objs); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// TestApplyAddonsOnePass: upgrade apply's move of the addons reads every
// addon's objects before it applies the first, and applies each wave of
// all of them at once: one pass, not one per addon. An addon the
// configuration turns off is said to be left alone and gets no request.
func TestApplyAddonsOnePass(t *testing.T) {
	s, client, out := liveState(t, false)
	s.Config.Networking.PodSubnet = "10.244.0.0/16"
	s.Config.Addons.KubeProxy.Disabled = true
	var mu sync.Mutex
	var requests []string
	client.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		name := ""
		if named, ok := a.(interface{ GetName() string }); ok {
			name = named.GetName()
		}
		requests = append(requests, a.GetVerb()+" "+a.GetResource().Resource+" "+name)
		return false, nil, nil
	})
	applied, err := ApplyAddons(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	firstPatch, lastGet := len(requests), -1
	for i, r := range requests {
		switch {
		case strings.HasPrefix(r, "patch ") && firstPatch == len(requests):
			firstPatch = i
		case strings.HasPrefix(r, "get "):
			lastGet = i
		}
		if strings.Contains(r, "kube-proxy") {
			t.Errorf("kube-proxy is turned off, yet: %s", r)
		}
	}
	if lastGet > firstPatch {
		t.Errorf("%s was read after %s was applied: one pass reads every addon's objects first\n%s", requests[lastGet], requests[firstPatch], strings.Join(requests, "\n"))
	}
	for _, want := range []string{"patch deployments coredns", "patch daemonsets kube-flannel", "patch daemonsets kubeboot-network-policy"} {
		if !slices.Contains(requests, want) {
			t.Errorf("no %q among the requests:\n%s", want, strings.Join(requests, "\n"))
		}
	}
	for _, want := range []string{"addons.kubeProxy.disabled: kube-proxy's objects are neither created nor changed", "Deployment kube-system/coredns created", "addons.manifests"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report does not say %q:\n%s", want, out)
		}
	}
	// The workloads as applied: CoreDNS's Deployment and the pod
	// network's DaemonSets, each once.
	var kept []string
	for name := range applied.deployments {
		kept = append(kept, "Deployment "+name)
	}
	for name := range applied.daemonSets {
		kept = append(kept, "DaemonSet "+name)
	}
	slices.Sort(kept)
	if want := []string{"DaemonSet kube-system/kube-flannel", "DaemonSet kube-system/kubeboot-network-policy", "Deployment kube-system/coredns"}; !slices.Equal(kept, want) {
		t.Errorf("workloads kept from the applies: %v, want %v", kept, want)
	}
}
