package tokens_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/csrapprover"
	"github.com/kubeboot/kubeboot/internal/fleet"
	"github.com/kubeboot/kubeboot/internal/tokens"
	"github.com/kubeboot/kubeboot/phases"
)

// workerToken is a worker's node-bound token as a fleet's plan gives it.
func workerToken(node, token string, inFirstFile bool) fleet.WorkerToken {
	return fleet.WorkerToken{Node: node, InFirstFile: inFirstFile, Token: config.BootstrapTokenSpec{
		Token: token, TTL: &metav1.Duration{Duration: 24 * time.Hour}, Description: "joins node " + node + " alone",
		Usages: []string{config.TokenUsageSigning, config.TokenUsageAuthentication},
		Groups: []string{csrapprover.BoundGroup, csrapprover.BoundNodeGroup(node)},
	}}
}

// TestAdmitWorkers: a worker added after the first node's init gets its
// token, bound to it, made in the cluster; an expired one is made valid
// again; a joined worker is left alone; a second run changes nothing.
func TestAdmitWorkers(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}})
	w1 := workerToken("w1", "aaaaaa.aaaaaaaaaaaaaaaa", true)
	w2 := workerToken("w2", "bbbbbb.bbbbbbbbbbbbbbbb", true)
	w3 := workerToken("w3", "cccccc.cccccccccccccccc", false)
	// w2's token, as cp1's init made it, has expired.
	if _, _, err := phases.ApplyToken(ctx, client, w2.Token, phases.CreatedByInitConfig, now.Add(-48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, err := tokens.AdmitWorkers(ctx, client, []fleet.WorkerToken{w1, w2, w3}, now)
	if err != nil {
		t.Fatal(err)
	}
	want := []tokens.Admission{
		{Node: "w1", TokenID: "aaaaaa", Result: tokens.Joined},
		// The fake API server keeps the resourceVersion of a patched
		// object, so this apply says "unchanged" here; its Secret tells.
		{Node: "w2", TokenID: "bbbbbb", Result: "unchanged", Expires: now.Add(24 * time.Hour)},
		{Node: "w3", TokenID: "cccccc", Result: "created", Expires: now.Add(24 * time.Hour)},
	}
	if len(got) != len(want) {
		t.Fatalf("admitted %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("admitted %+v, want %+v", got[i], want[i])
		}
	}
	if _, err := client.CoreV1().Secrets(bootstraptoken.Namespace).Get(ctx, bootstraptoken.SecretName("aaaaaa"), metav1.GetOptions{}); err == nil {
		t.Error("a token was made for w1, which has joined")
	}
	if info := storedToken(t, client, "bbbbbb"); !info.Expires.Equal(now.Add(24*time.Hour)) || info.CreatedBy != phases.CreatedByInitConfig {
		t.Errorf("w2's expired token Secret: %+v, want it valid for its ttl again, with init's label", info)
	}
	if info := storedToken(t, client, "cccccc"); info.Token.Value() != w3.Token.Token || info.CreatedBy != phases.CreatedByConfigFleet ||
		strings.Join(info.Groups, " ") != csrapprover.BoundGroup+" "+csrapprover.BoundNodeGroup("w3") {
		t.Errorf("w3's token Secret: %+v", info)
	}

	again, err := tokens.AdmitWorkers(ctx, client, []fleet.WorkerToken{w1, w2, w3}, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range again[1:] {
		if a.Result != "unchanged" {
			t.Errorf("a second run: %+v, want unchanged", a)
		}
	}
}

// storedToken reads the token Secret of id back.
func storedToken(t *testing.T, client *fake.Clientset, id string) bootstraptoken.Info {
	t.Helper()
	s, err := client.CoreV1().Secrets(bootstraptoken.Namespace).Get(context.Background(), bootstraptoken.SecretName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := bootstraptoken.FromSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// TestAdmitWorkersRefusesAnotherToken: a Secret of the worker's token ID
// that holds another token is not replaced, and the error names the node.
func TestAdmitWorkersRefusesAnotherToken(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	client := fake.NewClientset()
	other := workerToken("w9", "cccccc.dddddddddddddddd", false)
	if _, _, err := phases.ApplyToken(ctx, client, other.Token, phases.CreatedByTokenCreate, now); err != nil {
		t.Fatal(err)
	}
	_, err := tokens.AdmitWorkers(ctx, client, []fleet.WorkerToken{workerToken("w3", "cccccc.cccccccccccccccc", false)}, now)
	if err == nil || !strings.Contains(err.Error(), "node w3") || !strings.Contains(err.Error(), "holds another token") {
		t.Errorf("a Secret holding another token: %v", err)
	}
	if strings.Contains(err.Error(), "cccccccccccccccc") || strings.Contains(err.Error(), "dddddddddddddddd") {
		t.Errorf("the error quotes a token's secret: %v", err)
	}
}
