package templates

import (
	"testing"
)

// FuzzApplyPatches applies arbitrary patch bytes, of every patch type, to
// every rendered pod, and once more under an arbitrary file name: a patch
// that is malformed, of the wrong shape or breaks the pod must be an error
// naming the file, never a panic.
func FuzzApplyPatches(f *testing.F) {
	manifests, err := All(newConfig(nil), EtcdMembership{}, testKubeboot)
	if err != nil {
		f.Fatal(err)
	}
	// kind selects the component (kind%4) and the patch type (kind/4%3).
	for i, patchType := range patchTypes {
		for j, p := range testPatches(patchType) {
			f.Add(p.Data, uint8(i*4+j), p.File)
		}
	}
	for _, seed := range []struct {
		data, name string
		kind       uint8
	}{
		{`[{"op": "frobnicate", "path": "/spec"}]`, "kube-apiserver+json.json", 1},
		{"- op: remove\n  path: /spec/nodeName\n", "kube-apiserver+json.yaml", 1},
		{`{"op": "remove"}`, "kube-apiserver+json.json", 1},
		{"spec:\n  hostNetwrk: true\n", "kube-apiserver.yaml", 9},
		{`{"spec": {"HostNetwork": false}}`, "kube-apiserver+merge.json", 5},
		{"spec:\n  hostNetwork: [true]\n", "kube-apiserver+merge.yaml", 5},
		{"kind: Deployment\n", "kube-apiserver+merge.yaml", 5},
		{"spec:\n  hostNetwork: true\n  hostNetwork: false\n", "kube-apiserver.yaml", 9},
		{"spec: [\n", "kube-apiserver.yaml", 9},
		{"# nothing\n---\nmetadata: {annotations: {a: b}}\n---\n", "kube-scheduler0+merge.yaml", 7},
		{"spec:\n  containers:\n  - name: kube-scheduler\n    $patch: delete\n", "kube-scheduler.yaml", 11},
		{"spec:\n  $setElementOrder/containers: [{name: x}]\n", "etcd.yaml", 8},
		{"null", "etcd+merge.yaml", 4},
		{"{}", "kube-proxy.yaml", 0},
	} {
		f.Add([]byte(seed.data), seed.kind, seed.name)
	}
	f.Fuzz(func(t *testing.T, data []byte, kind uint8, name string) {
		m := manifests[int(kind)%len(manifests)]
		patchType := patchTypes[int(kind)/len(manifests)%len(patchTypes)]
		for _, p := range []Patch{
			{File: "patches/" + m.Component + "+" + patchType + ".yaml", Data: data},
			{File: "patches/" + name, Data: data},
		} {
			patched, err := ApplyPatches(m.Component, m.Pod, []Patch{p})
			if err == nil && patched == nil {
				t.Fatalf("%s: no pod and no error", p.File)
			}
		}
	})
}
