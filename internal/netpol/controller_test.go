package netpol

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestControllerFollowsTheCluster: the controller applies the node's
// verdicts once its watches synced, again when a policy comes or goes or
// a pod changes, and not when nothing that matters changed.
func TestControllerFollowsTheCluster(t *testing.T) {
	web := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.244.1.2"}}}}
	client := fake.NewClientset(web, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x"}})
	var mu sync.Mutex
	var applies [][]Verdicts
	apply := func(v []Verdicts) error {
		mu.Lock()
		defer mu.Unlock()
		applies = append(applies, v)
		return nil
	}
	waitApplies := func(n int) [][]Verdicts {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			mu.Lock()
			got := append([][]Verdicts(nil), applies...)
			mu.Unlock()
			if len(got) >= n || time.Now().After(deadline) {
				return got
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- New(client, "n1", apply, Options{Settle: 10 * time.Millisecond, Resync: time.Hour, Log: func(string) {}}).Run(ctx)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	if got := waitApplies(1); len(got) != 1 || len(got[0]) != 0 {
		t.Fatalf("first apply %v, want the empty table", got)
	}
	deny := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "deny"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	if _, err := client.NetworkingV1().NetworkPolicies("x").Create(ctx, deny, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitApplies(2)
	if len(got) != 2 || len(got[1]) != 1 || got[1][0].Pod.Name != "web" || got[1][0].Ingress == nil {
		t.Fatalf("after the policy: %v, want web isolated", got)
	}
	// A namespace's label that no policy reads computes the same verdicts:
	// no apply.
	if _, err := client.CoreV1().Namespaces().Update(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: map[string]string{"a": "b"}}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := client.NetworkingV1().NetworkPolicies("x").Delete(ctx, "deny", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got = waitApplies(3)
	if len(got) != 3 || len(got[2]) != 0 {
		t.Fatalf("after the policy's deletion: %v, want 3 applies, the last empty", got)
	}
}
