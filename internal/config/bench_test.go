package config

import "testing"

// BenchmarkValidateConfiguration validates the defaults of a node, as
// every command does with its configuration before it runs.
func BenchmarkValidateConfiguration(b *testing.B) {
	c := New()
	SetDefaults(c, Host{Name: "node1", Address: "10.0.0.10"})
	b.ReportAllocs()
	for b.Loop() {
		if errs := Validate(c); len(errs) > 0 {
			b.Fatal(errs.ToAggregate())
		}
	}
}
