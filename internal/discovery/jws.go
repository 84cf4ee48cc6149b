package discovery

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
)

// SignatureKeyPrefix starts the keys of cluster-info that the
// controller-manager's bootstrapsigner adds, one per token that may sign:
// jws-kubeconfig-<token ID>.
const SignatureKeyPrefix = "jws-kubeconfig-"

// ErrBadSignature is wrapped by VerifyJWS's error for a well-formed
// signature that does not match: another key, or another payload.
var ErrBadSignature = errors.New("the signature does not match")

// jwsHeader is the protected header the bootstrapsigner writes. Any other
// header parameter, such as "crit" or "b64", which would change what is
// signed, makes the signature one kubeboot does not accept.
type jwsHeader struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
	Typ string `json:"typ,omitempty"`
}

// SignJWS signs payload with token as the bootstrapsigner signs
// cluster-info's kubeconfig (see VerifyJWS): the same header, bytes for
// bytes, so that the bootstrapsigner finds its own signature and leaves
// it.
func SignJWS(payload []byte, token bootstraptoken.Token) string {
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","kid":"` + token.ID + `"}`))
	mac := hmac.New(sha256.New, []byte(token.Secret))
	mac.Write([]byte(header + "." + base64.RawURLEncoding.EncodeToString(payload)))
	return header + ".." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// VerifyJWS checks that detached signs payload with token, as the
// bootstrapsigner signs cluster-info's kubeconfig: a JWS (RFC 7515) in
// compact serialization with the payload detached (its Appendix F),
// "<header>..<signature>", HS256 with the token's secret as the key and
// its ID as the key ID. The comparison takes constant time. No error holds
// the secret.
func VerifyJWS(detached string, payload []byte, token bootstraptoken.Token) error {
	parts := strings.Split(detached, ".")
	if len(parts) != 3 || parts[1] != "" {
		return errors.New("not a JWS with a detached payload: want <header>..<signature>")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return fmt.Errorf("decode JWS header: %w", err)
	}
	var header jwsHeader
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&header); err != nil {
		return fmt.Errorf("decode JWS header %q: %w", raw, err)
	}
	if header.Alg != "HS256" {
		return fmt.Errorf("check JWS header %q: algorithm %q, want HS256", raw, header.Alg)
	}
	if header.Kid != token.ID {
		return fmt.Errorf("check JWS header %q: key ID %q, want the token ID %q", raw, header.Kid, token.ID)
	}
	signature, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return fmt.Errorf("decode JWS signature: %w", err)
	}
	mac := hmac.New(sha256.New, []byte(token.Secret))
	// The signing input: the encoded header and the encoded payload.
	mac.Write([]byte(parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload)))
	if !hmac.Equal(mac.Sum(nil), signature) {
		return ErrBadSignature
	}
	return nil
}
