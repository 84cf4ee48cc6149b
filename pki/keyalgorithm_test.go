package pki

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/internal/config"
)

func TestKeyMismatches(t *testing.T) {
	ecdsa := testConfig(t, nil)
	have := ensureAll(t, ecdsa)
	rsa := testConfig(t, func(c *config.ClusterConfiguration) { c.Certificates.KeyAlgorithm = config.RSA2048 })
	p384 := testConfig(t, func(c *config.ClusterConfiguration) { c.Certificates.KeyAlgorithm = config.ECDSAP384 })

	var all []string
	for _, s := range CertSpecs(ecdsa) {
		if s.Usage != UsageCA {
			all = append(all, s.File())
		}
	}
	all = append(all, KubeconfigNames(ecdsa)...)
	tests := []struct {
		name string
		cfg  *config.ClusterConfiguration
		have Set
		want []string
		to   config.KeyAlgorithm
	}{
		{name: "unchanged", cfg: ecdsa, have: have},
		{name: "to rsa-2048: every leaf and kubeconfig, no CA", cfg: rsa, have: have, want: all, to: config.RSA2048},
		{name: "another curve", cfg: p384, have: have, want: all, to: config.ECDSAP384},
		{name: "missing files are not listed", cfg: rsa, have: without(have, "apiserver.crt", "admin.conf"), want: without1(without1(all, "apiserver.crt"), "admin.conf"), to: config.RSA2048},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, m := range KeyMismatches(tt.cfg, tt.have, nil) {
				got = append(got, m.File)
				if m.Have != config.ECDSAP256 || m.Want != tt.to {
					t.Errorf("%s: have %s, want %s; expected %s and %s", m.File, m.Have, m.Want, config.ECDSAP256, tt.to)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("KeyMismatches (-want +got):\n%s", diff)
			}
		})
	}
}

// TestKeyMismatchesNamed: only the named leaves and kubeconfigs are listed.
func TestKeyMismatchesNamed(t *testing.T) {
	have := ensureAll(t, testConfig(t, nil))
	rsa := testConfig(t, func(c *config.ClusterConfiguration) { c.Certificates.KeyAlgorithm = config.RSA2048 })
	var got []string
	for _, m := range KeyMismatches(rsa, have, []string{config.CertAPIServer, config.KubeconfigAdmin, config.CertCA}) {
		got = append(got, m.File)
	}
	if diff := cmp.Diff([]string{"apiserver.crt", "admin.conf"}, got); diff != "" {
		t.Errorf("KeyMismatches of three names, a CA among them (-want +got):\n%s", diff)
	}
	if got := KeyMismatches(rsa, have, []string{}); len(got) > 0 {
		t.Errorf("KeyMismatches of no names = %v, want none", got)
	}
}
