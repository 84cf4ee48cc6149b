package config

import (
	"os"
	"testing"
)

// FuzzLoad feeds arbitrary bytes through decoding, defaulting and
// validation: bad input must be an error, never a panic.
func FuzzLoad(f *testing.F) {
	defaults, err := os.ReadFile("testdata/defaults.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(defaults)
	f.Add([]byte(header + "networking:\n  serviceSubnet: 10.96.0.0/16,fd00::/112\n  podSubnet: 10.244.0.0/16,fd01::/56\n"))
	f.Add([]byte(header + "etcd:\n  external:\n    endpoints: [https://a:2379]\n"))
	f.Add([]byte(header + "apiServer:\n  extraArgs:\n  - {name: v, value: \"2\"}\n  - {name: profiling, remove: true}\n"))
	f.Add([]byte(header + "a: 1\na: 2\n---\nkind: Other\n"))
	f.Add([]byte("- [\n"))
	f.Add([]byte(header + "node: &a {name: *a}\n"))
	f.Fuzz(func(_ *testing.T, data []byte) {
		c, doc, err := Decode("fuzz.yaml", data)
		if err != nil {
			return
		}
		errs := checkExplicitZeros(c, doc)
		SetDefaults(c, testHost)
		_ = validated("fuzz.yaml", doc, append(errs, Validate(c)...))
	})
}
