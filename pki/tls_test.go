package pki

import (
	"strings"
	"testing"
)

func TestClientTLS(t *testing.T) {
	specs := CertSpecs(testConfig(t, nil))
	ca := mustNewCA(t, specs[0])
	client := mustIssue(t, specs[2], ca) // apiserver-kubelet-client
	cfg, err := ClientTLS(ca.Cert, client.Cert, client.Key)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RootCAs == nil || len(cfg.Certificates) != 1 {
		t.Errorf("want a CA pool and one client certificate, got %v and %d", cfg.RootCAs, len(cfg.Certificates))
	}
	if _, err := ClientTLS([]byte("not PEM"), nil, nil); err == nil || !strings.Contains(err.Error(), "no PEM certificate in it") {
		t.Errorf("garbage CA: %v", err)
	}
	if _, err := ClientTLS(nil, client.Cert, ca.Key); err == nil {
		t.Error("a certificate with another key was accepted")
	}
}
