package health

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
)

// BenchmarkWaitDetection measures how long Wait takes to return after a
// component turns healthy, and reports the median and 95th percentile.
//
// Each iteration runs flipsPerIteration independent Waits, each against
// its own HTTPS server that answers /readyz with 500 until it flips to 200
// at a random moment 0.5 to 1.5 s after the Wait started. By then the poll
// interval has grown to its cap, fastInterval, where it stays for the first
// minute, so these flips see the same schedule as components that start in
// 5 to 30 s. Run it with a fixed count, since an iteration takes ~1.5 s:
//
//	go test ./health -run '^$' -bench WaitDetection -benchtime 10x
func BenchmarkWaitDetection(b *testing.B) {
	const flipsPerIteration = 10
	p := newPKI(b)
	type component struct {
		healthy atomic.Bool
		probe   Probe
	}
	components := make([]*component, flipsPerIteration)
	for i := range components {
		c := &component{}
		srv := serveTLS(b, flipping(&c.healthy), p.server.tls, p.ca)
		c.probe = httpsProbe(b, p, config.NameAPIServer, srv.URL, "/livez", "/readyz")
		components[i] = c
	}

	var mu sync.Mutex
	var latencies []time.Duration
	for b.Loop() {
		var wg sync.WaitGroup
		for _, c := range components {
			c.healthy.Store(false)
			wg.Go(func() {
				var flippedAt atomic.Int64
				flip := time.AfterFunc(500*time.Millisecond+rand.N(time.Second), func() {
					flippedAt.Store(time.Now().UnixNano())
					c.healthy.Store(true)
				})
				defer flip.Stop()
				if _, err := Wait(b.Context(), []Probe{c.probe}, WaitOptions{Timeout: 10 * time.Second}); err != nil {
					b.Error(err)
					return
				}
				latency := time.Since(time.Unix(0, flippedAt.Load()))
				mu.Lock()
				latencies = append(latencies, latency)
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	slices.Sort(latencies)
	percentile := func(q float64) float64 {
		return float64(latencies[int(q*float64(len(latencies)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(percentile(0.50), "p50-ms")
	b.ReportMetric(percentile(0.95), "p95-ms")
	b.ReportMetric(percentile(1), "max-ms")
	b.ReportMetric(0, "ns/op") // an iteration's duration is the random flip time
}
