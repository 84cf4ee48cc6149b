package staticpod

import "testing"

// BenchmarkValidate validates a kubeadm-style kube-apiserver manifest, the
// largest of the control-plane manifests kubeboot writes.
func BenchmarkValidate(b *testing.B) {
	data := readAPIServerManifest(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if res := Validate("kube-apiserver.yaml", data, testNode); !res.Accepted {
			b.Fatalf("not accepted: %v", res.Errors)
		}
	}
}
