package phases

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/config"
)

// tokenSecret is a token Secret made before the run.
func tokenSecret(id string, expires time.Time, createdBy string) *corev1.Secret {
	return bootstraptoken.Secret(bootstraptoken.ForNodes(bootstraptoken.Token{ID: id, Secret: "0123456789abcdef"}, expires, "earlier", createdBy))
}

// tokenSecrets lists the token Secrets.
func tokenSecrets(t *testing.T, s *Node) []bootstraptoken.Info {
	t.Helper()
	tokens, problems, err := ListTokens(context.Background(), s.API, "")
	if err != nil || len(problems) > 0 {
		t.Fatal(err, problems)
	}
	return tokens
}

func TestBootstrapToken(t *testing.T) {
	s, client, out := liveState(t, true)
	ca := writeCA(t, s)
	ctx := context.Background()
	start := time.Now()
	must(t, runBootstrapToken(ctx, s))

	tokens := tokenSecrets(t, s)
	if len(tokens) != 1 {
		t.Fatalf("want one token, got %v", tokens)
	}
	token := tokens[0]
	if !regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`).MatchString(token.Token.Value()) {
		t.Errorf("token %s has the wrong format", token.Token)
	}
	if exp := token.Expires.Sub(start); exp < 24*time.Hour-time.Minute || exp > 24*time.Hour+time.Minute {
		t.Errorf("token expires in %s, want 24h (bootstrapToken.ttl)", exp)
	}
	secret, err := client.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+token.Token.ID, metav1.GetOptions{})
	must(t, err)
	want := map[string]string{
		"usage-bootstrap-authentication": "true",
		"usage-bootstrap-signing":        "true",
		"auth-extra-groups":              "system:bootstrappers:kubeadm:default-node-token",
		"token-id":                       token.Token.ID,
	}
	for k, v := range want {
		if string(secret.Data[k]) != v {
			t.Errorf("secret data %s = %q, want %q", k, secret.Data[k], v)
		}
	}
	if secret.Type != "bootstrap.kubernetes.io/token" || secret.Labels[bootstraptoken.CreatedByLabel] != "init" {
		t.Errorf("secret type %q, labels %v", secret.Type, secret.Labels)
	}
	if _, err := time.Parse(time.RFC3339, string(secret.Data["expiration"])); err != nil {
		t.Errorf("expiration: %v", err)
	}
	for _, name := range []string{"kubeadm:kubelet-bootstrap", "kubeadm:node-autoapprove-bootstrap", "kubeadm:node-autoapprove-certificate-rotation", "kubeadm:get-nodes"} {
		if _, err := client.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Error(err)
		}
	}
	if _, err := client.RbacV1().ClusterRoles().Get(ctx, "kubeadm:get-nodes", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}

	// The CA pin, worked out from the certificate here.
	block, _ := pem.Decode(ca)
	cert, err := x509.ParseCertificate(block.Bytes)
	must(t, err)
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	wantCommand := "kubeboot join 10.0.0.10:6443 --token " + token.Token.Value() + " --discovery-token-ca-cert-hash sha256:" + hex.EncodeToString(sum[:])
	if s.JoinCommand != wantCommand {
		t.Errorf("join command\n %s\nwant\n %s", s.JoinCommand, wantCommand)
	}
	if strings.Contains(out.String(), token.Token.Secret) {
		t.Errorf("the progress events show the token's secret:\n%s", out)
	}
	if !strings.Contains(out.String(), token.Token.ID) {
		t.Errorf("the progress events do not name the token:\n%s", out)
	}

	// A re-run keeps the token, the objects and the join command.
	out.Reset()
	first := s.JoinCommand
	rerunChangesNothing(t, s, client, BootstrapToken)
	if s.JoinCommand != first {
		t.Errorf("the re-run changed the join command")
	}
	if !strings.Contains(out.String(), "reusing init's token "+token.Token.ID) || strings.Contains(out.String(), token.Token.Secret) {
		t.Errorf("re-run output:\n%s", out)
	}
}

// TestBootstrapTokenReuse: init reuses the token it made only while that
// is good for a join.
func TestBootstrapTokenReuse(t *testing.T) {
	now := time.Now()
	signless := tokenSecret("nosign", now.Add(20*time.Hour), "init")
	delete(signless.Data, "usage-bootstrap-signing")
	tests := []struct {
		name   string
		secret *corev1.Secret
		reused bool
	}{
		{"init's, valid", tokenSecret("abcdef", now.Add(20*time.Hour), "init"), true},
		{"init's, about to expire", tokenSecret("abcdef", now.Add(10*time.Minute), "init"), false},
		{"init's, longer than the ttl", tokenSecret("abcdef", now.Add(48*time.Hour), "init"), false},
		{"made by token create", tokenSecret("abcdef", now.Add(20*time.Hour), "token-create"), false},
		{"made by hand", tokenSecret("abcdef", now.Add(20*time.Hour), ""), false},
		{"init's, cannot sign", signless, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, _ := liveState(t, false, tt.secret)
			writeCA(t, s)
			must(t, runBootstrapToken(context.Background(), s))
			reused := strings.Contains(s.JoinCommand, "--token "+string(tt.secret.Data["token-id"])+".")
			if reused != tt.reused {
				t.Errorf("reused = %v, want %v (%s)", reused, tt.reused, s.JoinCommand)
			}
			if want := map[bool]int{true: 1, false: 2}[tt.reused]; len(tokenSecrets(t, s)) != want {
				t.Errorf("%d tokens, want %d", len(tokenSecrets(t, s)), want)
			}
		})
	}
}

// TestCreateTokenNeverReplacesAToken: a drawn ID that is taken is drawn
// again; the existing token stays.
func TestCreateTokenNeverReplacesAToken(t *testing.T) {
	s, client, _ := liveState(t, false)
	calls := 0
	client.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if calls++; calls == 1 {
			return true, nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "secrets"}, "bootstrap-token-taken")
		}
		return false, nil, nil
	})
	info, err := CreateToken(context.Background(), s.API, time.Hour, "test", CreatedByTokenCreate, time.Now())
	must(t, err)
	if calls != 2 || len(tokenSecrets(t, s)) != 1 || tokenSecrets(t, s)[0].Token != info.Token {
		t.Errorf("after a taken ID: %d creates, tokens %v", calls, tokenSecrets(t, s))
	}
}

func TestListAndDeleteTokens(t *testing.T) {
	now := time.Now()
	bad := tokenSecret("broken", now.Add(time.Hour), "")
	bad.Data["token-secret"] = []byte("short")
	opaque := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "kube-system"}, Type: corev1.SecretTypeOpaque}
	s, _, _ := liveState(t, false,
		tokenSecret("later1", now.Add(5*time.Hour), ""), tokenSecret("sooner", now.Add(time.Hour), "init"), bad, opaque)
	ctx := context.Background()
	tokens, problems, err := ListTokens(ctx, s.API, "")
	must(t, err)
	if len(tokens) != 2 || tokens[0].Token.ID != "sooner" || tokens[1].Token.ID != "later1" {
		t.Errorf("tokens %v, want sooner then later1", tokens)
	}
	if len(problems) != 1 || !strings.Contains(problems[0].Error(), "bootstrap-token-broken") || strings.Contains(problems[0].Error(), "short") {
		t.Errorf("problems %v", problems)
	}
	must(t, DeleteToken(ctx, s.API, "sooner"))
	if tokens, _, _ := ListTokens(ctx, s.API, ""); len(tokens) != 1 {
		t.Errorf("after delete: %v", tokens)
	}
	if err := DeleteToken(ctx, s.API, "sooner"); err == nil || !strings.Contains(err.Error(), `delete bootstrap token "sooner": no Secret kube-system/bootstrap-token-sooner`) {
		t.Errorf("deleting a missing token: %v", err)
	}
}

// The tokens given in the configuration of these tests.
const (
	fleetToken   = "fleet1.0123456789abcdef"
	signingToken = "signer.fedcba9876543210"
)

// givenTokens sets the configuration's bootstrapTokens, defaulted as
// config would: the fleet token joins, the signing one does not, and one
// is left to generate.
func givenTokens(s *Node, generatedFirst bool) {
	ttl := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	fleet := config.BootstrapTokenSpec{Token: fleetToken, TTL: ttl(2 * time.Hour), Description: "the fleet's nodes",
		Usages: []string{"signing", "authentication"}, Groups: []string{bootstraptoken.NodeGroup, "system:bootstrappers:fleet"}}
	signing := config.BootstrapTokenSpec{Token: signingToken, TTL: ttl(time.Hour), Usages: []string{"signing"}}
	generated := config.BootstrapTokenSpec{TTL: ttl(3 * time.Hour), Usages: []string{"signing", "authentication"}, Groups: []string{bootstraptoken.NodeGroup}}
	s.Config.BootstrapTokens = []config.BootstrapTokenSpec{signing, fleet, generated}
	if generatedFirst {
		s.Config.BootstrapTokens = []config.BootstrapTokenSpec{generated, signing, fleet}
	}
}

// TestBootstrapTokensFromConfig: init creates the configuration's tokens
// with their description, usages, groups and expiry, generates the one
// left to generate, prints the join command with the first given token
// that can join, shows no secret, and changes nothing when run again.
func TestBootstrapTokensFromConfig(t *testing.T) {
	for _, generatedFirst := range []bool{false, true} {
		s, client, out := liveState(t, true)
		writeCA(t, s)
		givenTokens(s, generatedFirst)
		start := time.Now()
		must(t, runBootstrapToken(context.Background(), s))

		byID := map[string]bootstraptoken.Info{}
		for _, info := range tokenSecrets(t, s) {
			byID[info.Token.ID] = info
		}
		if len(byID) != 3 {
			t.Fatalf("want three tokens, got %v", byID)
		}
		fleet, signing := byID["fleet1"], byID["signer"]
		var generated bootstraptoken.Info
		for id, info := range byID {
			if id != "fleet1" && id != "signer" {
				generated = info
			}
		}
		if fleet.Token.Value() != fleetToken || fleet.Description != "the fleet's nodes" || fleet.CreatedBy != "init-config" ||
			!slices.Equal(fleet.Usages, []string{"authentication", "signing"}) ||
			!slices.Equal(fleet.Groups, []string{bootstraptoken.NodeGroup, "system:bootstrappers:fleet"}) {
			t.Errorf("fleet token %+v", fleet)
		}
		checkExpiry(t, "fleet token", fleet, start, 2*time.Hour)
		if signing.Token.Value() != signingToken || !slices.Equal(signing.Usages, []string{"signing"}) || len(signing.Groups) != 0 || signing.Description != "" {
			t.Errorf("signing token %+v", signing)
		}
		checkExpiry(t, "signing token", signing, start, time.Hour)
		if generated.CreatedBy != "init" || generated.Description != initTokenDescription || !generated.JoinsUntil(start) {
			t.Errorf("generated token %+v", generated)
		}
		checkExpiry(t, "generated token", generated, start, 3*time.Hour)

		if !strings.Contains(s.JoinCommand, "--token "+fleetToken+" ") {
			t.Errorf("join command %q, want the fleet token", s.JoinCommand)
		}
		for _, secret := range []string{fleet.Token.Secret, signing.Token.Secret, generated.Token.Secret} {
			if strings.Contains(out.String(), secret) {
				t.Errorf("the progress events show a secret:\n%s", out)
			}
		}
		if !strings.Contains(out.String(), "bootstrap-token-fleet1 created: token fleet1 of the configuration") {
			t.Errorf("output:\n%s", out)
		}

		out.Reset()
		rerunChangesNothing(t, s, client, BootstrapToken)
		if !strings.Contains(out.String(), "bootstrap-token-fleet1 unchanged") || !strings.Contains(out.String(), "reusing init's token "+generated.Token.ID) {
			t.Errorf("re-run output:\n%s", out)
		}
	}
}

// checkExpiry wants info to expire ttl after start.
func checkExpiry(t *testing.T, what string, info bootstraptoken.Info, start time.Time, ttl time.Duration) {
	t.Helper()
	if exp := info.Expires.Sub(start); exp < ttl-time.Minute || exp > ttl+time.Minute {
		t.Errorf("%s expires in %s, want %s", what, exp, ttl)
	}
}

// TestGivenTokenKeepsItsSecret: a given token's Secret that exists keeps
// its expiry while that lies within the ttl, and is renewed once it has
// passed or lies beyond; one that holds another token of the same ID is
// refused, without a secret in the error, and left as it is.
func TestGivenTokenKeepsItsSecret(t *testing.T) {
	now := time.Now()
	existing := func(secret string, expires time.Time) *corev1.Secret {
		return bootstraptoken.Secret(bootstraptoken.ForNodes(bootstraptoken.Token{ID: "fleet1", Secret: secret}, expires, "earlier", "init-config"))
	}
	tests := []struct {
		name    string
		secret  *corev1.Secret
		expires time.Duration // from now; 0 for an error
	}{
		{"within the ttl", existing("0123456789abcdef", now.Add(time.Hour)), time.Hour},
		{"expired", existing("0123456789abcdef", now.Add(-time.Hour)), 2 * time.Hour},
		{"beyond the ttl", existing("0123456789abcdef", now.Add(48*time.Hour)), 2 * time.Hour},
		{"another token", existing("zzzzzzzzzzzzzzzz", now.Add(time.Hour)), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, client, out := liveState(t, false, tt.secret)
			writeCA(t, s)
			givenTokens(s, false)
			err := runBootstrapToken(context.Background(), s)
			have, getErr := client.CoreV1().Secrets("kube-system").Get(context.Background(), "bootstrap-token-fleet1", metav1.GetOptions{})
			must(t, getErr)
			info, infoErr := bootstraptoken.FromSecret(have)
			must(t, infoErr)
			if tt.expires == 0 {
				if err == nil || !strings.Contains(err.Error(), "bootstrapTokens[1]: the Secret kube-system/bootstrap-token-fleet1 holds another token with the ID fleet1: delete it (`kubeboot token delete fleet1`) or give another token (`kubeboot token generate`)") {
					t.Fatalf("got %v", err)
				}
				if strings.Contains(err.Error()+out.String(), "zzzzzzzzzzzzzzzz") || strings.Contains(err.Error()+out.String(), "0123456789abcdef") {
					t.Errorf("a secret shows: %v\n%s", err, out)
				}
				if info.Token.Secret != "zzzzzzzzzzzzzzzz" || info.Description != "earlier" {
					t.Errorf("the other token was changed: %+v", info)
				}
				return
			}
			must(t, err)
			checkExpiry(t, "fleet token", info, now, tt.expires)
			if info.Description != "the fleet's nodes" {
				t.Errorf("description %q, want the configuration's", info.Description)
			}
		})
	}
}

// TestNoTokenJoins: when no token can join a node, init prints no join
// command and says why.
func TestNoTokenJoins(t *testing.T) {
	s, _, out := liveState(t, false)
	writeCA(t, s)
	givenTokens(s, false)
	s.Config.BootstrapTokens = s.Config.BootstrapTokens[:1]
	must(t, runBootstrapToken(context.Background(), s))
	if s.JoinCommand != "" || !strings.Contains(out.String(), "none of bootstrapTokens can join a node") {
		t.Errorf("join command %q, output:\n%s", s.JoinCommand, out)
	}
}
