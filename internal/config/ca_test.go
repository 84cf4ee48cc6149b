package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

// testCA makes a certificate, a CA's when isCA, and its key, in PEM.
func testCA(t *testing.T, isCA bool) CertificateAuthority {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour),
		IsCA: isCA, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return CertificateAuthority{
		Cert: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		Key:  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})),
	}
}

// TestValidateCA: certificates.ca is a CA certificate with its own key;
// anything else is refused, naming the field, and no error shows the key.
func TestValidateCA(t *testing.T) {
	good, other, leaf := testCA(t, true), testCA(t, true), testCA(t, false)
	tests := []struct {
		name string
		ca   CertificateAuthority
		want string
	}{
		{"a CA and its key", good, ""},
		{"another CA's key", CertificateAuthority{Cert: good.Cert, Key: other.Key}, "certificates.ca: Invalid value: \"(hidden)\": want cert, a PEM certificate, and key, the PEM private key of that certificate"},
		{"no PEM", CertificateAuthority{Cert: "kubernetes", Key: good.Key}, "certificates.ca: Invalid value: \"(hidden)\""},
		{"no key", CertificateAuthority{Cert: good.Cert}, "certificates.ca: Invalid value: \"(hidden)\""},
		{"not a CA", leaf, `certificates.ca.cert: Invalid value: "kubernetes": not a CA certificate`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New()
			SetDefaults(c, Host{Name: "cp1", Address: "10.0.0.10"})
			c.Certificates.CA = &tt.ca
			err := Validate(c).ToAggregate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want %q", err, tt.want)
			case err != nil && strings.Contains(err.Error(), "PRIVATE KEY"):
				t.Fatalf("the error shows the key: %v", err)
			}
		})
	}
}
