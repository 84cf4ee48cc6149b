package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestExplicitZero checks that a zero the user wrote is an error, not a
// silent default, while an absent or null field still gets its default.
func TestExplicitZero(t *testing.T) {
	tests := []struct {
		name, body string
		want       []string // substrings of the error; none for a valid file
	}{
		{"zero leaf validity", "certificates:\n  leafValidity: 0h\n", []string{`line 4: certificates.leafValidity: Invalid value: "0h": must be positive`}},
		{"zero CA validity", "certificates: {caValidity: 0s}\n", []string{`line 3: certificates.caValidity: Invalid value: "0s": must be positive`}},
		{"zero renewal window", "certificates:\n  renewBefore: 0m\n", []string{`line 4: certificates.renewBefore: Invalid value: "0m": 0 would reuse a certificate until it has expired`}},
		{"zero timeout", "timeouts:\n  controlPlane: \"0\"\n", []string{`line 4: timeouts.controlPlane: Invalid value: "0": must be positive`}},
		{"zero token lifetime", "bootstrapToken: {ttl: 0s}\n", []string{`line 3: bootstrapToken.ttl: Invalid value: "0s": 0 would be a token that never expires`}},
		{"zero bind port", "apiServer:\n  bindPort: 0x0\n", []string{`line 4: apiServer.bindPort: Invalid value: "0x0": not a port`}},
		{"several zeros with another error", "node: {advertiseAddress: x}\ncertificates: {caValidity: 0h, leafValidity: 0h}\n", []string{
			"certificates.caValidity", "certificates.leafValidity", "node.advertiseAddress"}},
		{"absent fields get defaults", "certificates: {}\n", nil},
		{"null port gets its default", "apiServer: {bindPort: null}\n", nil},
		{"non-zero values stay", "certificates: {caValidity: 20000h, leafValidity: 2000h, renewBefore: 1h}\ntimeouts: {controlPlane: 1m}\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for kind, load := range map[string]func(string) error{
				"Load": func(p string) error { _, err := loadInit(p, testHost); return err },
				"LoadJoin": func(p string) error {
					_, err := loadJoinFile(p, testHost)
					return err
				},
			} {
				body := header + tt.body
				if kind == "LoadJoin" {
					body = joinHeader + tt.body + "controlPlaneEndpoint: 10.0.0.10\njoin: {etcdEndpoints: [https://10.0.0.11:2379]}\n"
				}
				err := load(writeConfig(t, body))
				if len(tt.want) == 0 {
					if err != nil {
						t.Fatalf("%s: %v", kind, err)
					}
					continue
				}
				var inv *InvalidError
				if !errors.As(err, &inv) {
					t.Fatalf("%s: got %v, want an *InvalidError", kind, err)
				}
				if len(inv.Problems) != len(tt.want) {
					t.Errorf("%s: got %d problems, want %d:\n%v", kind, len(inv.Problems), len(tt.want), err)
				}
				for _, w := range tt.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: error lacks %q:\n%v", kind, w, err)
					}
				}
			}
		})
	}
	c, err := loadInit(writeConfig(t, header+"certificates: {caValidity: 20000h, leafValidity: 2000h, renewBefore: 1h}\n"), testHost)
	if err != nil || c.Certificates.RenewBefore.Duration != time.Hour || c.Certificates.LeafValidity.Duration != 2000*time.Hour {
		t.Errorf("user durations were not kept: %+v, %v", c.Certificates, err)
	}
}
