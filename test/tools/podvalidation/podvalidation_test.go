// Package podvalidation checks that kubeboot's static-pod validator
// (package staticpod, what `kubeboot validate` and init's validate phase
// run) rejects every pod the kubelet v1.36 rejects, on a corpus of
// mutations of the pods kubeboot renders. It is a module of its own
// because it imports k8s.io/kubernetes, which the product never does.
package podvalidation

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/staticpod"
	"github.com/kubeboot/kubeboot/templates"
	"k8s.io/kubernetes/pkg/capabilities"
)

// nodeName is the node both validators check for; the kubelet appends it
// to each static pod's name.
const nodeName = "node-1"

// minCorpus is the smallest corpus that counts as a test of agreement.
const minCorpus = 1000

// indexes are the list indexes in a field path, which the summary of
// stricter findings leaves out.
var indexes = regexp.MustCompile(`\[[0-9]+\]`)

// case_ is one pod of the corpus as both validators read it.
type case_ struct {
	name string
	yaml []byte
}

// corpus renders kubeboot's static pods with a default configuration and
// returns them, then every mutant of each, as YAML, without duplicates.
func corpus(t *testing.T) []case_ {
	cfg := config.New()
	config.SetDefaults(cfg, config.Host{Name: nodeName, Address: "192.0.2.10"})
	manifests, err := templates.All(cfg, templates.EtcdMembership{}, templates.Kubeboot{Binary: "/usr/bin/kubeboot", Version: "v0.0.0-test"})
	if err != nil {
		t.Fatal(err)
	}
	var cases []case_
	seen := map[string]bool{}
	for _, m := range manifests {
		all := append([]mutant{{name: m.Component + ": as rendered", pod: m.Pod}}, mutants(m.Component, m.Pod)...)
		for _, mu := range all {
			data, err := templates.Marshal(mu.pod)
			if err != nil {
				t.Fatalf("%s: %v", mu.name, err)
			}
			if !seen[string(data)] {
				seen[string(data)] = true
				cases = append(cases, case_{name: mu.name, yaml: data})
			}
		}
	}
	return cases
}

// TestKubeletAgreement fails on every pod of the corpus that the kubelet
// rejects and kubeboot accepts. kubeboot may be stricter (it refuses
// unknown fields, a volume without a source, ...): those are counted and
// logged, not failed.
func TestKubeletAgreement(t *testing.T) {
	// The kubelet allows privileged containers at start-up; validation
	// reads that setting.
	capabilities.Initialize(capabilities.Capabilities{AllowPrivileged: true})
	start := time.Now()
	cases := corpus(t)
	if len(cases) < minCorpus {
		t.Fatalf("corpus has %d pods, want at least %d", len(cases), minCorpus)
	}
	var kubeletRejects, kubebootRejects, bothReject int
	var missed []string          // the kubelet rejects, kubeboot accepts
	stricter := map[string]int{} // kubeboot rejects, the kubelet accepts: by first finding
	for _, c := range cases {
		kubeletErr := kubeletVerdict(c.yaml, nodeName)
		res := staticpod.Validate(c.name, c.yaml, nodeName)
		if kubeletErr != nil {
			kubeletRejects++
		}
		if !res.Accepted {
			kubebootRejects++
		}
		switch {
		case kubeletErr != nil && !res.Accepted:
			bothReject++
		case kubeletErr != nil:
			missed = append(missed, fmt.Sprintf("%s\n\tkubelet: %.300s", c.name, kubeletErr))
		case !res.Accepted:
			stricter[indexes.ReplaceAllString(res.Errors[0].String(), "[]")]++
		}
	}
	n := len(cases)
	agree := n - len(missed) - sum(stricter)
	t.Logf("corpus: %d pods in %v; the kubelet rejects %d, kubeboot rejects %d, both %d", n, time.Since(start).Round(time.Millisecond), kubeletRejects, kubebootRejects, bothReject)
	t.Logf("agreement: %d of %d (%.2f%%); kubelet rejects but kubeboot accepts: %d; kubeboot rejects but kubelet accepts: %d",
		agree, n, 100*float64(agree)/float64(n), len(missed), sum(stricter))
	for _, f := range slices.Sorted(maps.Keys(stricter)) {
		t.Logf("stricter (%d): %s", stricter[f], f)
	}
	if len(missed) > 0 {
		t.Errorf("kubeboot accepts %d pods that the kubelet rejects:\n%s", len(missed), strings.Join(missed, "\n"))
	}
}

// sum adds the counts of m.
func sum(m map[string]int) int {
	total := 0
	for _, v := range m {
		total += v
	}
	return total
}
