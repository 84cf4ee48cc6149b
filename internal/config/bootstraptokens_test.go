package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/exit"
)

// The tokens of these tests; their secrets must never appear in an error.
const (
	goodToken  = "abcdef.0123456789abcdef"
	otherToken = "ghijkl.fedcba9876543210"
	badSecret  = "s3cretpart"
)

// TestBootstrapTokensLoad loads configurations listing tokens: the good
// ones get their defaults, and each bad one is an exit-2 error naming the
// field, its line and the fix, never with a token's secret.
func TestBootstrapTokensLoad(t *testing.T) {
	tests := []struct {
		name, body string
		want       []string // substrings of the error, one per problem; none for a valid file
	}{
		{"one given token", "bootstrapTokens: [{token: " + goodToken + "}]\n", nil},
		{"a given and a generated token, in full", "bootstrapTokens:\n- token: " + goodToken + "\n  ttl: 2h\n  description: fleet\n  usages: [authentication, signing]\n  groups: [system:bootstrappers:fleet, system:bootstrappers:kubeadm:default-node-token]\n- ttl: 30m\n", nil},
		{"signing only, without groups", "bootstrapTokens: [{token: " + goodToken + ", usages: [signing]}]\n", nil},
		{"malformed token", "bootstrapTokens:\n- token: " + goodToken + "\n- token: abcdef." + badSecret + "\n", []string{
			"line 5: bootstrapTokens[1].token: Invalid value: \"abcdef.…\": not a bootstrap token ([a-z0-9]{6}.[a-z0-9]{16}); generate one with `kubeboot token generate`"}},
		{"a secret without its ID", "bootstrapTokens: [{token: " + badSecret + "0123456}]\n", []string{
			"bootstrapTokens[0].token: Invalid value: \"…\": not a bootstrap token"}},
		{"upper case", "bootstrapTokens: [{token: ABCDEF.0123456789ABCDEF}]\n", []string{"bootstrapTokens[0].token: Invalid value: \"…\""}},
		{"the same ID twice", "bootstrapTokens: [{token: " + goodToken + "}, {token: " + strings.Replace(otherToken, "ghijkl", "abcdef", 1) + "}]\n", []string{
			"bootstrapTokens[1].token: Invalid value: \"abcdef.…\": bootstrapTokens[0] has the same ID"}},
		{"two generated tokens", "bootstrapTokens: [{}, {description: second}]\n", []string{
			"bootstrapTokens[1].token: Required value: only one token may be left for init to generate (bootstrapTokens[0] is)"}},
		{"zero ttl", "bootstrapTokens: [{token: " + goodToken + ", ttl: 0s}]\n", []string{
			"bootstrapTokens[0].ttl: Invalid value: \"0s\": 0 would be a token that never expires"}},
		{"short ttl", "bootstrapTokens: [{token: " + goodToken + ", ttl: 30s}]\n", []string{
			"bootstrapTokens[0].ttl: Invalid value: \"30s\": must be at least 1m"}},
		{"unknown usage", "bootstrapTokens: [{token: " + goodToken + ", usages: [signing, authentification]}]\n", []string{
			"bootstrapTokens[0].usages[1]: Unsupported value: \"authentification\": supported values: \"signing\", \"authentication\""}},
		{"no usage", "bootstrapTokens: [{token: " + goodToken + ", usages: []}]\n", []string{
			"bootstrapTokens[0].usages: Required value: a token needs a usage"}},
		{"a usage twice", "bootstrapTokens: [{token: " + goodToken + ", usages: [signing, signing]}]\n", []string{
			"bootstrapTokens[0].usages[1]: Duplicate value: \"signing\""}},
		{"group outside system:bootstrappers", "bootstrapTokens: [{token: " + goodToken + ", groups: [system:masters]}]\n", []string{
			"bootstrapTokens[0].groups[0]: Invalid value: \"system:masters\": want system:bootstrappers:"}},
		{"group ending in a colon", "bootstrapTokens: [{token: " + goodToken + ", groups: [\"system:bootstrappers:\"]}]\n", []string{
			"bootstrapTokens[0].groups[0]: Invalid value"}},
		{"groups without authentication", "bootstrapTokens: [{token: " + goodToken + ", usages: [signing], groups: [system:bootstrappers:x]}]\n", []string{
			"bootstrapTokens[0].groups: Invalid value: \"system:bootstrappers:x\": a token authenticates in groups only with the authentication usage"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadInit(writeConfig(t, header+tt.body), testHost)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var inv *InvalidError
			if !errors.As(err, &inv) || exit.Code(err) != exit.Usage {
				t.Fatalf("got %v (exit %d), want an *InvalidError, exit %d", err, exit.Code(err), exit.Usage)
			}
			if len(inv.Problems) != len(tt.want) {
				t.Errorf("got %d problems, want %d:\n%v", len(inv.Problems), len(tt.want), err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			for _, secret := range []string{badSecret, "0123456789abcdef", "0123456789ABCDEF", "fedcba9876543210"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("the error shows the secret %q:\n%v", secret, err)
				}
			}
		})
	}
}

// TestBootstrapTokensDefaults: a listed token takes bootstrapToken.ttl, both
// usages and, when it authenticates, the default-node-token group; what it
// sets stays.
func TestBootstrapTokensDefaults(t *testing.T) {
	c, err := loadInit(writeConfig(t, header+"bootstrapToken: {ttl: 3h}\nbootstrapTokens:\n- token: "+goodToken+
		"\n- {token: "+otherToken+", ttl: 2h, description: d, usages: [signing]}\n- {groups: []}\n"), testHost)
	if err != nil {
		t.Fatal(err)
	}
	given, signing, generated := c.BootstrapTokens[0], c.BootstrapTokens[1], c.BootstrapTokens[2]
	if given.TTL.Duration != 3*time.Hour || !slices.Equal(given.Usages, []string{"signing", "authentication"}) ||
		!slices.Equal(given.Groups, []string{"system:bootstrappers:kubeadm:default-node-token"}) {
		t.Errorf("defaulted token: ttl %s, usages %v, groups %v", given.TTL.Duration, given.Usages, given.Groups)
	}
	if signing.TTL.Duration != 2*time.Hour || signing.Description != "d" || !slices.Equal(signing.Usages, []string{"signing"}) || signing.Groups != nil {
		t.Errorf("a token's own settings changed: %+v", signing)
	}
	if generated.Token != "" || len(generated.Groups) != 0 || generated.Groups == nil {
		t.Errorf("groups: [] became %v", generated.Groups)
	}
	if got := c.InitBootstrapTokens(); len(got) != 3 || got[0].Token != goodToken {
		t.Errorf("InitBootstrapTokens = %+v, want the list", got)
	}
}

// TestInitBootstrapTokensWithoutList: with no list, init makes one
// generated token, of bootstrapToken.ttl, that nodes join with.
func TestInitBootstrapTokensWithoutList(t *testing.T) {
	c, err := loadInit(writeConfig(t, header+"bootstrapToken: {ttl: 5h}\n"), testHost)
	if err != nil {
		t.Fatal(err)
	}
	got := c.InitBootstrapTokens()
	if len(got) != 1 || got[0].Token != "" || got[0].TTL.Duration != 5*time.Hour ||
		!slices.Equal(got[0].Usages, []string{"signing", "authentication"}) || !slices.Equal(got[0].Groups, []string{DefaultTokenGroup}) {
		t.Errorf("InitBootstrapTokens = %+v", got)
	}
	if len(c.BootstrapTokens) != 0 {
		t.Errorf("defaults listed tokens: %+v", c.BootstrapTokens)
	}
}

// TestTokenConstantsMatchBootstraptoken keeps config's copies of the
// token usages and group in step with bootstraptoken's.
func TestTokenConstantsMatchBootstraptoken(t *testing.T) {
	if TokenUsageSigning != bootstraptoken.UsageSigning || TokenUsageAuthentication != bootstraptoken.UsageAuthentication ||
		DefaultTokenGroup != bootstraptoken.NodeGroup {
		t.Error("config's token usages or group differ from bootstraptoken's")
	}
	for _, id := range []string{"abcdef", "a0b1c2", "ABCDEF", "abcde", "abcdefg", "abc.de"} {
		if tokenIDPattern.MatchString(id) != bootstraptoken.ValidID(id) {
			t.Errorf("%q: config and bootstraptoken disagree on the ID", id)
		}
	}
}
