package pki

import (
	"testing"

	"github.com/kubeboot/kubeboot/internal/config"
)

// testConfig returns a defaulted configuration for node "cp-1" at
// 10.0.0.5, after mutate has set what the test needs.
func testConfig(t testing.TB, mutate func(*config.ClusterConfiguration)) *config.ClusterConfiguration {
	t.Helper()
	cfg := config.New()
	if mutate != nil {
		mutate(cfg)
	}
	config.SetDefaults(cfg, config.Host{Name: "cp-1", Address: "10.0.0.5"})
	return cfg
}
