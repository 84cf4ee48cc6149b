package fleet

import (
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"strings"

	"github.com/kubeboot/kubeboot/pki"
)

// SignatureHeader is the HTTP header in which `kubeboot config serve`
// sends a node file's signature: the fleet's config CA's, base64, as the
// file's .sig beside it holds it.
const SignatureHeader = "Kubeboot-Signature"

// sigExt names a node file's signature: nodes/<name>.yaml.sig.
const sigExt = ".sig"

// sign is the CA's signature of data's SHA-256 digest, base64.
func sign(ca pki.KeyPair, data []byte) (string, error) {
	pair, err := tls.X509KeyPair(ca.Cert, ca.Key)
	if err != nil {
		return "", err
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return "", fmt.Errorf("the CA's key cannot sign")
	}
	digest := sha256.Sum256(data)
	sig, err := signer.Sign(rand.Reader, digest[:], crypto.SHA256)
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(sig), nil
}

// Verify checks that signature (base64, as sign makes it) is ca's of
// data.
func Verify(ca *x509.Certificate, data []byte, signature string) error {
	sig, err := base64.StdEncoding.DecodeString(strings.TrimSpace(signature))
	if err != nil {
		return fmt.Errorf("the signature is no base64: %w", err)
	}
	algorithm := x509.ECDSAWithSHA256
	if ca.PublicKeyAlgorithm == x509.RSA {
		algorithm = x509.SHA256WithRSA
	}
	return ca.CheckSignature(algorithm, data, sig)
}

// signature is the signature of a node's file: the one a run before
// left beside it when it still verifies (a signature is random, and a
// second run changes no byte), or a new one.
func signature(ca pki.KeyPair, data []byte, previous []byte) (string, error) {
	if previous != nil {
		if cert, err := ParseCA(ca.Cert); err == nil && Verify(cert, data, string(previous)) == nil {
			return string(previous), nil
		}
	}
	sig, err := sign(ca, data)
	return sig + "\n", err
}

// ParseCA parses a PEM certificate, the fleet's config CA's.
func ParseCA(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}
