package pki

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"

	"github.com/kubeboot/kubeboot/internal/config"
)

// ServiceAccountKey is the key pair that signs and verifies service-account
// tokens: sa.key and sa.pub, both PEM.
type ServiceAccountKey struct {
	Private []byte
	Public  []byte
}

// NewServiceAccountKey generates the service-account key pair.
func NewServiceAccountKey(alg config.KeyAlgorithm) (ServiceAccountKey, error) {
	key, err := newKey(alg)
	if err != nil {
		return ServiceAccountKey{}, fmt.Errorf("create key pair %q: %w", config.KeyServiceAccount, err)
	}
	pub, err := publicKeyPEM(key)
	if err != nil {
		return ServiceAccountKey{}, fmt.Errorf("create key pair %q: %w", config.KeyServiceAccount, err)
	}
	return ServiceAccountKey{Private: key.pem, Public: pub}, nil
}

// The service-account key file names, as messages name them.
const (
	saKeyFile = config.KeyServiceAccount + ".key"
	saPubFile = config.KeyServiceAccount + ".pub"
)

// ServiceAccountPublicKey derives sa.pub from sa.key, for a node that has
// lost its sa.pub.
func ServiceAccountPublicKey(private []byte) ([]byte, error) {
	key, err := parseKey(private)
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", saKeyFile, err)
	}
	return publicKeyPEM(privateKey{signer: key})
}

// CheckServiceAccountKey returns an error unless both halves parse and
// sa.pub is the public half of sa.key.
func CheckServiceAccountKey(sa ServiceAccountKey) error {
	key, err := parseKey(sa.Private)
	if err != nil {
		return fmt.Errorf("read %q: %w", saKeyFile, err)
	}
	block, _ := pem.Decode(sa.Public)
	if block == nil {
		return fmt.Errorf("read %q: no PEM public key found", saPubFile)
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return fmt.Errorf("read %q: %w", saPubFile, err)
	}
	if !publicKeysEqual(key.Public(), pub) {
		return fmt.Errorf("%s does not match %s", saPubFile, saKeyFile)
	}
	return nil
}

func publicKeyPEM(key privateKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(key.signer.Public())
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}
