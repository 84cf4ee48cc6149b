package templates

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/internal/config"
)

func TestParsePatchFileName(t *testing.T) {
	tests := []struct {
		name, component, patchType, err string
	}{
		{name: "kube-apiserver.yaml", component: config.NameAPIServer, patchType: PatchStrategic},
		{name: "kube-apiserver+strategic.yaml", component: config.NameAPIServer, patchType: PatchStrategic},
		{name: "etcd+json.json", component: config.NameEtcd, patchType: PatchJSON},
		{name: "kube-scheduler+merge.yaml", component: config.NameScheduler, patchType: PatchMerge},
		{name: "kube-controller-manager0+merge.json", component: config.NameControllerManager, patchType: PatchMerge},
		{name: "kube-apiserver-audit+json.yaml", component: config.NameAPIServer, patchType: PatchJSON},
		{name: "etcd_10.yaml", component: config.NameEtcd, patchType: PatchStrategic},
		{name: "kube-apiserver.yml", err: "extension"},
		{name: "kube-apiserver+json.yaml.bak", err: "extension"},
		{name: "kube-apiserver+.yaml", err: `unknown patch type ""`},
		{name: "kube-apiserver+jsonx.yaml", err: `unknown patch type "jsonx"`},
		{name: "kube-apiserver+json+merge.yaml", err: `unknown patch type "json+merge"`},
		{name: "kube-apiserver.old.yaml", err: `unknown target "kube-apiserver.old"`},
		{name: "kube-proxy+json.json", err: `unknown target "kube-proxy"`},
		{name: "kubeletconfiguration.yaml", err: "unknown target"},
		{name: ".yaml", err: "unknown target"},
	}
	for _, tc := range tests {
		component, patchType, err := ParsePatchFileName(tc.name)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), tc.name) {
				t.Errorf("%s: got error %v, want one naming the file and containing %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || component != tc.component || patchType != tc.patchType {
			t.Errorf("%s: got %q, %q, %v; want %q, %q", tc.name, component, patchType, err, tc.component, tc.patchType)
		}
	}
}

// doublingCopies is a JSON patch of n operations that each copy the whole
// spec into itself, doubling the pod.
func doublingCopies(n int) []byte {
	ops := make([]string, n)
	for i := range ops {
		ops[i] = fmt.Sprintf(`{"op": "copy", "from": "/spec", "path": "/spec/x%d"}`, i)
	}
	return []byte("[" + strings.Join(ops, ",") + "]")
}

func TestApplyPatchesErrors(t *testing.T) {
	pod, err := APIServer(newConfig(nil))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		patch Patch
		want  string
	}{
		{"bad json patch op", Patch{File: "p/kube-apiserver+json.json", Data: []byte(`[{"op": "frobnicate", "path": "/spec"}]`)}, "frobnicate"},
		{"json patch on a missing path", Patch{File: "p/kube-apiserver+json.yaml", Data: []byte("- op: remove\n  path: /spec/nodeName\n")}, "remove"},
		{"json patch that is an object", Patch{File: "p/kube-apiserver+json.json", Data: []byte(`{"op": "remove"}`)}, "decode json patch"},
		{"unknown field", Patch{File: "p/kube-apiserver.yaml", Data: []byte("spec:\n  hostNetwrk: true\n")}, `unknown field "spec.hostNetwrk"`},
		{"wrong case", Patch{File: "p/kube-apiserver+merge.json", Data: []byte(`{"spec": {"HostNetwork": false}}`)}, "HostNetwork"},
		{"wrong type", Patch{File: "p/kube-apiserver+merge.yaml", Data: []byte("spec:\n  hostNetwork: [true]\n")}, "decode patched pod"},
		{"kind changed", Patch{File: "p/kube-apiserver+merge.yaml", Data: []byte("kind: Deployment\n")}, `kind "Deployment"`},
		{"duplicate key", Patch{File: "p/kube-apiserver.yaml", Data: []byte("spec:\n  hostNetwork: true\n  hostNetwork: false\n")}, "read patch"},
		{"invalid yaml", Patch{File: "p/kube-apiserver.yaml", Data: []byte("spec: [\n")}, "read patch"},
		{"unknown component", Patch{File: "p/kube-proxy.yaml", Data: []byte("{}")}, `unknown target "kube-proxy"`},
		{"bad name", Patch{File: "p/kube-apiserver+foo.yaml", Data: []byte("{}")}, `unknown patch type "foo"`},
		{"bad name of another component", Patch{File: "p/etcd.yml", Data: []byte("{}")}, "extension"},
		{"copies that double the pod", Patch{File: "p/kube-apiserver+json.json", Data: doublingCopies(40)}, "the kubelet's limit on a manifest"},
	}
	for _, tc := range tests {
		_, err := ApplyPatches(config.NameAPIServer, pod, []Patch{tc.patch})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.patch.File) {
			t.Errorf("%s: got error %v, want one naming %s and containing %q", tc.name, err, tc.patch.File, tc.want)
		}
	}
	if _, err := ApplyPatches("kube-proxy", pod, nil); err == nil || !strings.Contains(err.Error(), "kube-proxy") {
		t.Errorf("unknown component argument: got error %v", err)
	}
}

// TestApplyPatchesOrder checks that patches apply sorted by file name, that
// every YAML document of a file applies, that patches of other components
// and empty documents are skipped, and that the input pod is left alone.
func TestApplyPatchesOrder(t *testing.T) {
	pod, err := Scheduler(newConfig(nil))
	if err != nil {
		t.Fatal(err)
	}
	original := pod.DeepCopy()
	patches := []Patch{
		{File: "b/kube-scheduler1+merge.yaml", Data: []byte("metadata:\n  annotations:\n    order: second\n")},
		{File: "a/kube-apiserver+merge.yaml", Data: []byte("metadata:\n  annotations:\n    order: apiserver\n")},
		{File: "a/kube-scheduler0+merge.yaml", Data: []byte("# nothing yet\n---\nmetadata:\n  annotations:\n    order: first\n    first: seen\n---\nmetadata:\n  annotations:\n    documents: two\n")},
	}
	patched, err := ApplyPatches(config.NameScheduler, pod, patches)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"order": "second", "first": "seen", "documents": "two"}
	if diff := cmp.Diff(want, patched.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(original, pod); diff != "" {
		t.Errorf("ApplyPatches changed its input:\n%s", diff)
	}
	unpatched, err := ApplyPatches(config.NameScheduler, pod, nil)
	if err != nil || unpatched == pod || !cmp.Equal(unpatched, pod) {
		t.Errorf("no patches: got a different pod, the same pointer or error %v", err)
	}
}

// BenchmarkApplyPatchesNone is ApplyPatches of each of a node's pods when
// no patch targets them, as on most nodes: every converged re-run of init
// does it once per pod.
func BenchmarkApplyPatchesNone(b *testing.B) {
	manifests, err := All(newConfig(nil), EtcdMembership{}, testKubeboot)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, m := range manifests {
			if _, err := ApplyPatches(m.Component, m.Pod, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
}
