package phases

import (
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// TestApplyRecord: a second apply of the same objects sends none of them,
// yet reports each unchanged; the record is not among the files a run
// wrote; an object someone else changed, an object
// the configuration changes, and every object once the record is gone or
// unreadable, are applied again.
func TestApplyRecord(t *testing.T) {
	s, client, out := liveState(t, false)
	var mu sync.Mutex
	var patched []string
	client.PrependReactor("patch", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		patched = append(patched, a.GetResource().Resource+" "+a.(k8stesting.PatchAction).GetName())
		return false, nil, nil
	})
	all := joined(addonObjects(t, s))
	run := func(t *testing.T) []string {
		t.Helper()
		patched = nil
		out.Reset()
		if err := applyObjects(t.Context(), s, client, all); err != nil {
			t.Fatal(err)
		}
		slices.Sort(patched)
		return patched
	}
	first := run(t)
	if len(first) < 20 {
		t.Fatalf("the first run applied %d objects: %v", len(first), first)
	}
	if written := s.Files.Changes().Written; slices.Contains(written, ApplyRecordPath(s.Config)) {
		t.Errorf("the record is among the files the run wrote: %v", written)
	}
	firstReport := out.String()
	t.Run("converged", func(t *testing.T) {
		if got := run(t); len(got) > 0 {
			t.Errorf("a second run applied %v", got)
		}
		if want := strings.ReplaceAll(firstReport, "created", "unchanged"); out.String() != want {
			t.Errorf("report:\n%s\nwant:\n%s", out, want)
		}
	})
	t.Run("changed by someone else", func(t *testing.T) {
		cm, err := client.CoreV1().ConfigMaps("kube-system").Get(t.Context(), "coredns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := cm.Data["Corefile"]
		cm.Data["Corefile"] = ".:53 { whoami }"
		if _, err := client.CoreV1().ConfigMaps("kube-system").Update(t.Context(), cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
			t.Fatal(err)
		}
		if got := run(t); !slices.Equal(got, []string{"configmaps coredns"}) {
			t.Errorf("applied %v, want the edited ConfigMap alone", got)
		}
		cm, err = client.CoreV1().ConfigMaps("kube-system").Get(t.Context(), "coredns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cm.Data["Corefile"] != want {
			t.Errorf("the edit stayed: %q", cm.Data["Corefile"])
		}
	})
	t.Run("changed by the configuration", func(t *testing.T) {
		d := all.Deployments[0].DeepCopy()
		d.Spec.Template.Spec.Containers[0].Image += "-next"
		all.Deployments = append([]*appsv1.Deployment{d}, all.Deployments[1:]...)
		if got := run(t); !slices.Equal(got, []string{"deployments " + d.Name}) {
			t.Errorf("applied %v, want the changed Deployment alone", got)
		}
	})
	t.Run("record gone", func(t *testing.T) {
		must(t, os.Remove(s.Files.HostPath(ApplyRecordPath(s.Config))))
		if got := run(t); len(got) != len(first) {
			t.Errorf("applied %d objects without a record, want all %d", len(got), len(first))
		}
	})
	t.Run("record unreadable", func(t *testing.T) {
		must(t, s.Files.WriteFile(ApplyRecordPath(s.Config), []byte("{"), 0o600))
		if got := run(t); len(got) != len(first) {
			t.Errorf("applied %d objects with a broken record, want all %d", len(got), len(first))
		}
		if !strings.Contains(out.String(), "every object is applied again") {
			t.Errorf("no warning of the broken record:\n%s", out)
		}
		if got := run(t); len(got) > 0 {
			t.Errorf("the record was not written again: a second run applied %v", got)
		}
	})
}
