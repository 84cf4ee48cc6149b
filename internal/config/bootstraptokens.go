package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The usages of a bootstrap token, as the API server's authenticator and
// the bootstrapsigner read them; the default is both, as kubeadm's.
const (
	TokenUsageSigning        = "signing"
	TokenUsageAuthentication = "authentication"
)

// DefaultTokenGroup is the extra group of a token that authenticates,
// kubeadm's default-node-token group, to which node join's RBAC is bound.
const DefaultTokenGroup = "system:bootstrappers:kubeadm:default-node-token"

// tokenGroupPattern is the form of a token's extra group, as the API
// server's bootstrap token authenticator accepts it. It and the package's
// other larger patterns are compiled on first use, not at every start of
// kubeboot: its 256 repetitions alone cost 0.8 ms and 170 KB.
var tokenGroupPattern = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]$`)
})

// defaultTokenUsages are the usages of a token that lists none.
func defaultTokenUsages() []string {
	return []string{TokenUsageSigning, TokenUsageAuthentication}
}

// setBootstrapTokenDefaults gives each listed token the TTL of
// bootstrapToken.ttl, both usages and, when it authenticates, the
// default-node-token group, where it sets none.
func setBootstrapTokenDefaults(c *ClusterConfiguration) {
	for i := range c.BootstrapTokens {
		t := &c.BootstrapTokens[i]
		if t.TTL == nil {
			t.TTL = &metav1.Duration{Duration: c.BootstrapToken.TTL.Duration}
		}
		if t.Usages == nil {
			t.Usages = defaultTokenUsages()
		}
		if t.Groups == nil && slices.Contains(t.Usages, TokenUsageAuthentication) {
			t.Groups = []string{DefaultTokenGroup}
		}
	}
}

// InitBootstrapTokens are the tokens init creates: the listed ones, or,
// when none are listed, one generated token that nodes join with, valid
// for bootstrapToken.ttl.
func (c *ClusterConfiguration) InitBootstrapTokens() []BootstrapTokenSpec {
	if len(c.BootstrapTokens) > 0 {
		return c.BootstrapTokens
	}
	return []BootstrapTokenSpec{{
		TTL:    &metav1.Duration{Duration: c.BootstrapToken.TTL.Duration},
		Usages: defaultTokenUsages(),
		Groups: []string{DefaultTokenGroup},
	}}
}

// validateBootstrapTokens checks the defaulted list of tokens. A token's
// secret is never quoted: a malformed token shows its ID at most.
func validateBootstrapTokens(p *field.Path, tokens []BootstrapTokenSpec) field.ErrorList {
	var errs field.ErrorList
	ids := map[string]int{}
	generated := -1
	for i, t := range tokens {
		tp := p.Index(i)
		errs = append(errs, validateTokenSpec(tp, t)...)
		if t.Token == "" {
			if generated >= 0 {
				errs = append(errs, field.Required(tp.Child("token"), fmt.Sprintf(
					"only one token may be left for init to generate (%s is): give this one a token made with `kubeboot token generate`", p.Index(generated))))
				continue
			}
			generated = i
			continue
		}
		if !tokenPattern.MatchString(t.Token) {
			continue
		}
		id, _, _ := strings.Cut(t.Token, ".")
		if first, ok := ids[id]; ok {
			errs = append(errs, field.Invalid(tp.Child("token"), maskedToken(t.Token), fmt.Sprintf(
				"%s has the same ID: each token needs its own; generate one with `kubeboot token generate`", p.Index(first))))
			continue
		}
		ids[id] = i
	}
	return errs
}

// validateTokenSpec checks one token: its format, lifetime, usages and
// groups.
func validateTokenSpec(p *field.Path, t BootstrapTokenSpec) field.ErrorList {
	var errs field.ErrorList
	if t.Token != "" && !tokenPattern.MatchString(t.Token) {
		errs = append(errs, field.Invalid(p.Child("token"), maskedToken(t.Token),
			"not a bootstrap token ([a-z0-9]{6}.[a-z0-9]{16}); generate one with `kubeboot token generate`, or leave the field out for init to generate one"))
	}
	switch ttl := t.TTL; {
	case ttl == nil:
		errs = append(errs, field.Required(p.Child("ttl"), "a lifetime like 24h"))
	case ttl.Duration == 0:
		errs = append(errs, field.Invalid(p.Child("ttl"), ttl.Duration.String(),
			"0 would be a token that never expires (kubeadm's meaning), a standing credential to join nodes: use a lifetime like 24h, or leave the field out for bootstrapToken.ttl"))
	case ttl.Duration < MinBootstrapTokenTTL:
		errs = append(errs, field.Invalid(p.Child("ttl"), ttl.Duration.String(),
			"must be at least 1m, like 24h: a node joins with the token after init creates it"))
	}
	errs = append(errs, validateTokenUsages(p.Child("usages"), t.Usages)...)
	errs = append(errs, validateTokenGroups(p.Child("groups"), t.Groups)...)
	if len(t.Groups) > 0 && !slices.Contains(t.Usages, TokenUsageAuthentication) {
		errs = append(errs, field.Invalid(p.Child("groups"), strings.Join(t.Groups, ","),
			"a token authenticates in groups only with the authentication usage: add authentication to usages, or set groups: []"))
	}
	return errs
}

// validateTokenUsages wants at least one usage, each known and listed once.
func validateTokenUsages(p *field.Path, usages []string) field.ErrorList {
	if len(usages) == 0 {
		return field.ErrorList{field.Required(p, "a token needs a usage: signing, authentication or both; leave the field out for both")}
	}
	var errs field.ErrorList
	known := defaultTokenUsages()
	for i, u := range usages {
		switch {
		case !slices.Contains(known, u):
			errs = append(errs, field.NotSupported(p.Index(i), u, known))
		case slices.Contains(usages[:i], u):
			errs = append(errs, field.Duplicate(p.Index(i), u))
		}
	}
	return errs
}

// validateTokenGroups wants each group in system:bootstrappers:, listed
// once.
func validateTokenGroups(p *field.Path, groups []string) field.ErrorList {
	var errs field.ErrorList
	for i, g := range groups {
		switch {
		case !tokenGroupPattern().MatchString(g):
			errs = append(errs, field.Invalid(p.Index(i), g,
				"want system:bootstrappers: followed by lower-case letters, digits, ':' and '-', like "+DefaultTokenGroup))
		case slices.Contains(groups[:i], g):
			errs = append(errs, field.Duplicate(p.Index(i), g))
		}
	}
	return errs
}

// maskedToken shows a token without its secret: its ID and a dot when it
// starts with one, else nothing of it.
func maskedToken(s string) string {
	id, _, found := strings.Cut(s, ".")
	if found && tokenIDPattern.MatchString(id) {
		return id + ".…"
	}
	return "…"
}

// tokenIDPattern is the form of a token's public ID.
var tokenIDPattern = regexp.MustCompile(`^[a-z0-9]{6}$`)
