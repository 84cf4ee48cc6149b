package pki

import (
	"syscall"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
)

// BenchmarkPKI creates the whole PKI of a node in memory, as a fresh
// `kubeboot init` does: every certificate, the service-account key and
// every kubeconfig. Besides wall time it reports the CPU time per
// operation, which stays meaningful when other processes share the cores.
func BenchmarkPKI(b *testing.B) {
	for _, alg := range config.KeyAlgorithms {
		b.Run(string(alg), func(b *testing.B) {
			cfg := testConfig(b, func(c *config.ClusterConfiguration) { c.Certificates.KeyAlgorithm = alg })
			start := cpuTime(b)
			for b.Loop() {
				if _, err := Ensure(cfg, Set{}, time.Now(), nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the user and system time the process has used so far.
func cpuTime(b *testing.B) time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		b.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
