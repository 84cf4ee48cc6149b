package discovery

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
)

// The bootstrapsigner's own signature, a known answer: the output of
// k8s.io/cluster-bootstrap v0.36.3's jws.ComputeDetachedSignature (which the
// controller-manager's bootstrapsigner calls) for vectorPayload with token
// abcdef.0123456789abcdef, computed once with that module.
const (
	vectorPayload   = "apiVersion: v1\nclusters:\n- cluster:\n    server: https://10.0.0.10:6443\n  name: \"\"\nkind: Config\n"
	vectorSignature = "eyJhbGciOiJIUzI1NiIsImtpZCI6ImFiY2RlZiJ9..WVRaWfBMmcP6njN8CSCXl-0Qwqsz9zeFsASvlKfGOi0"
)

var testToken = bootstraptoken.Token{ID: "abcdef", Secret: "0123456789abcdef"}

// TestSignMatchesTheBootstrapsigner: SignJWS writes the bootstrapsigner's
// signature, byte for byte.
func TestSignMatchesTheBootstrapsigner(t *testing.T) {
	if got := SignJWS([]byte(vectorPayload), testToken); got != vectorSignature {
		t.Fatalf("SignJWS = %s, want the bootstrapsigner's %s", got, vectorSignature)
	}
}

func TestVerifyJWS(t *testing.T) {
	header := func(json string) string { return base64.RawURLEncoding.EncodeToString([]byte(json)) }
	sigPart := vectorSignature[strings.LastIndex(vectorSignature, ".")+1:]
	tests := []struct {
		name      string
		signature string
		payload   string
		token     bootstraptoken.Token
		want      string // "" for a good signature
	}{
		{"the bootstrapsigner's signature", vectorSignature, vectorPayload, testToken, ""},
		{"the wrong secret", vectorSignature, vectorPayload, bootstraptoken.Token{ID: "abcdef", Secret: "0123456789abcdeg"}, ErrBadSignature.Error()},
		{"another token's signature", vectorSignature, vectorPayload, bootstraptoken.Token{ID: "zyxwvu", Secret: testToken.Secret}, `key ID "abcdef", want the token ID "zyxwvu"`},
		{"a tampered kubeconfig", vectorSignature, strings.Replace(vectorPayload, "10.0.0.10", "10.6.6.6", 1), testToken, ErrBadSignature.Error()},
		{"a tampered signature", vectorSignature[:len(vectorSignature)-2] + "AA", vectorPayload, testToken, ErrBadSignature.Error()},
		{"an attached payload", strings.Replace(vectorSignature, "..", "."+base64.RawURLEncoding.EncodeToString([]byte(vectorPayload))+".", 1), vectorPayload, testToken, "not a JWS with a detached payload"},
		{"algorithm none", header(`{"alg":"none","kid":"abcdef"}`) + "..", vectorPayload, testToken, `algorithm "none", want HS256`},
		{"an unencoded payload", header(`{"alg":"HS256","kid":"abcdef","b64":false}`) + ".." + sigPart, vectorPayload, testToken, `unknown field "b64"`},
		{"garbage", "garbage", vectorPayload, testToken, "not a JWS"},
		{"a header that is not base64url", "%%%.." + sigPart, vectorPayload, testToken, "decode JWS header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := VerifyJWS(tt.signature, []byte(tt.payload), tt.token)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("VerifyJWS: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("VerifyJWS: got %v, want an error containing %q", err, tt.want)
			case err != nil && strings.Contains(err.Error(), tt.token.Secret):
				t.Errorf("the error holds the secret: %v", err)
			}
		})
	}
	if err := VerifyJWS(SignJWS([]byte("x"), testToken), []byte("y"), testToken); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a signature of another payload: %v, want ErrBadSignature", err)
	}
}
