// Package bootstraptoken owns bootstrap tokens, the credential with which
// nodes join a cluster: their format, their generation from crypto/rand, and
// the kube-system Secret that holds one, built and read back. It is pure: it
// never talks to the API server, never touches disk and never prints. A
// token's secret half never appears in its errors or in its String form.
package bootstraptoken

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Secret of a bootstrap token, as the API server's bootstrap token
// authenticator and the controller-manager's bootstrapsigner and
// tokencleaner read it.
const (
	// Namespace holds every token Secret.
	Namespace = metav1.NamespaceSystem
	// SecretType is the type the authenticator looks for.
	SecretType corev1.SecretType = "bootstrap.kubernetes.io/token"
	// SecretPrefix starts a token Secret's name; the token ID ends it.
	SecretPrefix = "bootstrap-token-"

	keyID          = "token-id"
	keySecret      = "token-secret"
	keyExpiration  = "expiration"
	keyDescription = "description"
	keyGroups      = "auth-extra-groups"
	usagePrefix    = "usage-bootstrap-"
)

// The usages kubeboot gives its tokens: authentication lets a kubelet
// bootstrap with the token, signing lets the bootstrapsigner sign
// cluster-info with it for discovery.
const (
	UsageAuthentication = "authentication"
	UsageSigning        = "signing"
)

// NodeGroup is the group a joining node's token authenticates in, beside
// system:bootstrappers: kubeadm's default-node-token group, to which the
// RBAC of node join is bound.
const NodeGroup = "system:bootstrappers:kubeadm:default-node-token"

// CreatedByLabel names what created a token Secret (init, or token
// create), so a re-run of init finds the token it created.
const CreatedByLabel = "kubeboot.io/created-by"

// alphabet is what both halves of a token are made of.
const alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"

// The lengths of the two halves.
const (
	IDLength     = 6
	SecretLength = 16
)

var (
	idPattern    = regexp.MustCompile(`^[a-z0-9]{6}$`)
	tokenPattern = regexp.MustCompile(`^([a-z0-9]{6})\.([a-z0-9]{16})$`)
	// tokenInText is a token inside other text: not part of a longer
	// word or dotted name.
	tokenInText = regexp.MustCompile(`(^|[^a-z0-9.])([a-z0-9]{6})\.[a-z0-9]{16}($|[^a-z0-9.])`)
)

// Redact is text with the secret half of every token in it masked, as
// String masks it: what an error or a warning shows, whatever it quotes.
func Redact(text string) string {
	// Tokens side by side share a separator: replace until none is left.
	for {
		redacted := tokenInText.ReplaceAllString(text, "${1}${2}."+strings.Repeat("*", SecretLength)+"${3}")
		if redacted == text {
			return text
		}
		text = redacted
	}
}

// Token is a bootstrap token: a public ID and a secret. Its String form
// hides the secret, so that printing a Token by mistake leaks nothing;
// Value is the token itself.
type Token struct {
	// ID names the token; it is not secret.
	ID string
	// Secret is the secret half.
	Secret string
}

// Value is the token as a node presents it: "<id>.<secret>".
func (t Token) Value() string { return t.ID + "." + t.Secret }

// String is the token with its secret masked.
func (t Token) String() string { return t.ID + "." + strings.Repeat("*", SecretLength) }

// Generate makes a token from rand, which should be crypto/rand.Reader.
// Each character is drawn uniformly: bytes that would bias the choice are
// skipped.
func Generate(rand io.Reader) (Token, error) {
	draw := func(n int) (string, error) {
		out := make([]byte, 0, n)
		// 252 is the largest multiple of 36 below 256.
		const limit = 256 - 256%len(alphabet)
		for len(out) < n {
			buf := make([]byte, n-len(out))
			if _, err := io.ReadFull(rand, buf); err != nil {
				return "", fmt.Errorf("generate bootstrap token: %w", err)
			}
			for _, b := range buf {
				if int(b) < limit {
					out = append(out, alphabet[int(b)%len(alphabet)])
				}
			}
		}
		return string(out), nil
	}
	id, err := draw(IDLength)
	if err != nil {
		return Token{}, err
	}
	secret, err := draw(SecretLength)
	if err != nil {
		return Token{}, err
	}
	return Token{ID: id, Secret: secret}, nil
}

// Parse reads a token "<id>.<secret>". Its error never quotes the input.
func Parse(s string) (Token, error) {
	m := tokenPattern.FindStringSubmatch(s)
	if m == nil {
		return Token{}, errors.New("not a bootstrap token: want 6 and 16 characters of [a-z0-9], joined by a dot")
	}
	return Token{ID: m[1], Secret: m[2]}, nil
}

// ValidID reports whether id is a token ID: 6 characters of [a-z0-9].
func ValidID(id string) bool { return idPattern.MatchString(id) }

// SecretName is the name of the Secret of the token with this ID.
func SecretName(id string) string { return SecretPrefix + id }

// Info is a token and what its Secret says about it.
type Info struct {
	// Token is the token.
	Token Token
	// Expires is when the token stops working; zero means never.
	Expires time.Time
	// Usages are the usage-bootstrap-* keys set to "true", like
	// "authentication".
	Usages []string
	// Groups are the extra groups the token authenticates in.
	Groups []string
	// Description says what the token is for.
	Description string
	// CreatedBy is the value of the CreatedByLabel, if any.
	CreatedBy string
}

// ForNodes is the Info of a token nodes join with: it authenticates and
// signs, in NodeGroup, until expires.
func ForNodes(t Token, expires time.Time, description, createdBy string) Info {
	return Info{
		Token:       t,
		Expires:     expires.UTC().Truncate(time.Second),
		Usages:      []string{UsageAuthentication, UsageSigning},
		Groups:      []string{NodeGroup},
		Description: description,
		CreatedBy:   createdBy,
	}
}

// JoinsUntil reports whether a node can still join with the token at t:
// it authenticates, signs cluster-info, is in NodeGroup and has not expired.
func (i Info) JoinsUntil(t time.Time) bool {
	return slices.Contains(i.Usages, UsageAuthentication) && slices.Contains(i.Usages, UsageSigning) &&
		slices.Contains(i.Groups, NodeGroup) && (i.Expires.IsZero() || i.Expires.After(t))
}

// Secret builds the token's Secret: data only (no stringData, which the
// API server would move), so that what is stored is what was built.
func Secret(i Info) *corev1.Secret {
	data := map[string][]byte{
		keyID:     []byte(i.Token.ID),
		keySecret: []byte(i.Token.Secret),
	}
	if !i.Expires.IsZero() {
		data[keyExpiration] = []byte(i.Expires.UTC().Format(time.RFC3339))
	}
	for _, u := range i.Usages {
		data[usagePrefix+u] = []byte("true")
	}
	if len(i.Groups) > 0 {
		data[keyGroups] = []byte(strings.Join(i.Groups, ","))
	}
	if i.Description != "" {
		data[keyDescription] = []byte(i.Description)
	}
	s := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: SecretName(i.Token.ID), Namespace: Namespace},
		Type:       SecretType,
		Data:       data,
	}
	if i.CreatedBy != "" {
		s.Labels = map[string]string{CreatedByLabel: i.CreatedBy}
	}
	return s
}

// FromSecret reads a token Secret back. A Secret that is not a well-formed
// token Secret is an error, which never quotes the secret.
func FromSecret(s *corev1.Secret) (Info, error) {
	if s.Type != SecretType {
		return Info{}, fmt.Errorf("secret %q is of type %q, not %q", s.Name, s.Type, SecretType)
	}
	id := string(s.Data[keyID])
	if !ValidID(id) || s.Name != SecretName(id) {
		return Info{}, fmt.Errorf("secret %q: %s is not the token ID its name ends with", s.Name, keyID)
	}
	t, err := Parse(id + "." + string(s.Data[keySecret]))
	if err != nil {
		return Info{}, fmt.Errorf("secret %q: %s is not 16 characters of [a-z0-9]", s.Name, keySecret)
	}
	info := Info{Token: t, Description: string(s.Data[keyDescription]), CreatedBy: s.Labels[CreatedByLabel]}
	if raw, ok := s.Data[keyExpiration]; ok {
		if info.Expires, err = time.Parse(time.RFC3339, string(raw)); err != nil {
			return Info{}, fmt.Errorf("secret %q: %s %q is not an RFC 3339 time", s.Name, keyExpiration, raw)
		}
	}
	for key, value := range s.Data {
		if usage, ok := strings.CutPrefix(key, usagePrefix); ok && string(value) == "true" {
			info.Usages = append(info.Usages, usage)
		}
	}
	sort.Strings(info.Usages)
	for _, g := range strings.Split(string(s.Data[keyGroups]), ",") {
		if g = strings.TrimSpace(g); g != "" {
			info.Groups = append(info.Groups, g)
		}
	}
	return info, nil
}
