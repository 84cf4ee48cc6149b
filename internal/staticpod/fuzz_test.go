package staticpod

import (
	"testing"
)

// FuzzValidate feeds arbitrary bytes to the manifest decoder and checks
// that Validate never panics and always returns a consistent Result.
func FuzzValidate(f *testing.F) {
	f.Add(readAPIServerManifest(f))
	f.Add([]byte(manifest))
	f.Add([]byte(manifest + "---\n" + manifest))
	f.Add([]byte("apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: a}\n"))
	f.Add([]byte("spec:\n  volumes:\n  - name: v\n    hostPath: {path: n}\n  containers: [{name: c, command: [on, &a yes, *a]}]\n"))
	f.Add([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"},"spec":{"containers":[{"name":"c","image":"i"}]}}`))
	f.Add([]byte("\x00\xff{[: - ---\n..."))
	f.Fuzz(func(t *testing.T, data []byte) {
		res := Validate("fuzz.yaml", data, testNode)
		if res.Accepted != (len(res.Errors) == 0) {
			t.Fatalf("Accepted = %v with %d errors", res.Accepted, len(res.Errors))
		}
		if res.Errors == nil || res.Warnings == nil {
			t.Fatal("nil Errors or Warnings: JSON output would print null")
		}
		for _, f := range append(res.Errors, res.Warnings...) {
			if f.Message == "" {
				t.Fatalf("finding without a message: %+v", f)
			}
		}
		if err := Err([]Result{res}); (err == nil) != res.Accepted {
			t.Fatalf("Err() = %v for Accepted = %v", err, res.Accepted)
		}
	})
}
