package bootstraptoken

import (
	"bytes"
	"crypto/rand"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

var format = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)

func TestGenerate(t *testing.T) {
	seen := map[string]bool{}
	counts := map[rune]int{}
	for range 2000 {
		tok, err := Generate(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		if !format.MatchString(tok.Value()) {
			t.Fatalf("token %q does not match %s", tok.Value(), format)
		}
		if seen[tok.Value()] {
			t.Fatalf("token %s generated twice", tok)
		}
		seen[tok.Value()] = true
		for _, r := range tok.Value() {
			counts[r]++
		}
	}
	// 2000 tokens hold 44000 characters, about 1222 of each of 36: a
	// character that never comes up, or comes up twice as often as it
	// should, means a broken draw.
	for _, r := range alphabet {
		if n := counts[r]; n < 800 || n > 1700 {
			t.Errorf("character %q drawn %d times of 44000", r, n)
		}
	}
}

// TestGenerateSkipsBiasedBytes feeds bytes of which only some may be used:
// 252 and above would favour the first characters of the alphabet.
func TestGenerateSkipsBiasedBytes(t *testing.T) {
	var in []byte
	for i := range 22 {
		in = append(in, 255, 252, byte(i)) // only the last of each triple counts
	}
	tok, err := Generate(bytes.NewReader(append(in, make([]byte, 200)...)))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.Value(), "012345.6789abcdefghijkl"; got != want {
		t.Errorf("token %q, want %q", got, want)
	}
	if _, err := Generate(bytes.NewReader([]byte{1, 2, 3})); err == nil {
		t.Error("a short random source must be an error")
	}
}

func TestParse(t *testing.T) {
	tok, err := Parse("abcdef.0123456789abcdef")
	if err != nil || tok.ID != "abcdef" || tok.Secret != "0123456789abcdef" {
		t.Fatalf("Parse = %+v, %v", tok, err)
	}
	for _, bad := range []string{"", "abcdef", "abcdef.0123456789abcde", "ABCDEF.0123456789abcdef", "abcdef:0123456789abcdef", "abcdef.0123456789abcdef\n", " abcdef.0123456789abcdef"} {
		_, err := Parse(bad)
		if err == nil {
			t.Errorf("Parse(%q) accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), "0123456789") {
			t.Errorf("Parse(%q) quotes its input: %v", bad, err)
		}
	}
	if !ValidID("a1b2c3") || ValidID("a1b2c") || ValidID("a1b2c3d") || ValidID("A1B2C3") {
		t.Error("ValidID is wrong")
	}
}

func TestStringMasksTheSecret(t *testing.T) {
	tok := Token{ID: "abcdef", Secret: "0123456789abcdef"}
	for _, s := range []string{tok.String(), fmtV(tok)} {
		if strings.Contains(s, tok.Secret) {
			t.Errorf("%q shows the secret", s)
		}
	}
}

func TestSecretRoundTrip(t *testing.T) {
	expires := time.Date(2030, 1, 2, 3, 4, 5, 600, time.FixedZone("x", 3600))
	info := ForNodes(Token{ID: "abcdef", Secret: "0123456789abcdef"}, expires, "for tests", "init")
	s := Secret(info)
	want := map[string]string{
		"token-id":                       "abcdef",
		"token-secret":                   "0123456789abcdef",
		"expiration":                     "2030-01-02T02:04:05Z",
		"usage-bootstrap-authentication": "true",
		"usage-bootstrap-signing":        "true",
		"auth-extra-groups":              NodeGroup,
		"description":                    "for tests",
	}
	got := map[string]string{}
	for k, v := range s.Data {
		got[k] = string(v)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("data (-want +got):\n%s", diff)
	}
	if s.Name != "bootstrap-token-abcdef" || s.Namespace != "kube-system" || s.Type != SecretType || s.Labels[CreatedByLabel] != "init" || s.Kind != "Secret" || s.APIVersion != "v1" {
		t.Errorf("secret %+v", s.ObjectMeta)
	}
	back, err := FromSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(info, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if !back.JoinsUntil(time.Date(2030, 1, 2, 2, 4, 4, 0, time.UTC)) || back.JoinsUntil(time.Date(2030, 1, 2, 2, 4, 5, 0, time.UTC)) {
		t.Error("JoinsUntil does not end at the expiration")
	}
}

func TestFromSecretRefusesMalformedSecrets(t *testing.T) {
	good := func() *corev1.Secret {
		return Secret(ForNodes(Token{ID: "abcdef", Secret: "0123456789abcdef"}, time.Now().Add(time.Hour), "", ""))
	}
	tests := []struct {
		name   string
		modify func(*corev1.Secret)
	}{
		{"wrong type", func(s *corev1.Secret) { s.Type = corev1.SecretTypeOpaque }},
		{"name and ID differ", func(s *corev1.Secret) { s.Name = "bootstrap-token-ghijkl" }},
		{"short secret", func(s *corev1.Secret) { s.Data["token-secret"] = []byte("0123456789abcde") }},
		{"bad expiration", func(s *corev1.Secret) { s.Data["expiration"] = []byte("tomorrow") }},
	}
	for _, tt := range tests {
		s := good()
		tt.modify(s)
		_, err := FromSecret(s)
		if err == nil {
			t.Errorf("%s: accepted", tt.name)
			continue
		}
		if strings.Contains(err.Error(), "0123456789abcde") {
			t.Errorf("%s: the error quotes the secret: %v", tt.name, err)
		}
	}
	s := good()
	delete(s.Data, "usage-bootstrap-signing")
	delete(s.Data, "expiration")
	info, err := FromSecret(s)
	if err != nil || !info.Expires.IsZero() || info.JoinsUntil(time.Now()) {
		t.Errorf("a token that cannot sign does not serve joins: %+v, %v", info, err)
	}
}

// TestRedact: every token in a text has its secret masked, wherever it
// stands; what only looks like part of a token is left.
func TestRedact(t *testing.T) {
	for text, want := range map[string]string{
		"abcdef.0123456789abcdef":                                 "abcdef.****************",
		`unknown phase "abcdef.0123456789abcdef"`:                 `unknown phase "abcdef.****************"`,
		"sha256:abcdef.0123456789abcdef, abcdef.0123456789abcdeg": "sha256:abcdef.****************, abcdef.****************",
		"abcdef.0123456789abcdef abcdef.0123456789abcdef":         "abcdef.**************** abcdef.****************",
		"node1.abcdef.0123456789abcdef.example.com":               "node1.abcdef.0123456789abcdef.example.com",
		"abcdef.0123456789abcdef0":                                "abcdef.0123456789abcdef0",
		"no token here":                                           "no token here",
	} {
		if got := Redact(text); got != want {
			t.Errorf("Redact(%q) = %q, want %q", text, got, want)
		}
	}
}
