package pki

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/internal/config"
)

func mustIssue(t *testing.T, spec CertSpec, ca KeyPair) KeyPair {
	t.Helper()
	pair, err := Issue(spec, ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

func mustNewCA(t *testing.T, spec CertSpec) KeyPair {
	t.Helper()
	pair, err := NewCA(spec)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

func TestCheck(t *testing.T) {
	specs := CertSpecs(testConfig(t, nil))
	caSpec, apiServer, kubeletClient := specs[0], specs[1], specs[2]
	ca, otherCA := mustNewCA(t, caSpec), mustNewCA(t, caSpec)
	good := mustIssue(t, apiServer, ca)
	cert := mustParseCert(t, good.Cert)
	issued, expiry := cert.NotBefore.Add(backdate), day(cert.NotAfter)

	withSANs := apiServer
	withSANs.DNS = append([]string{"extra.example.com"}, withSANs.DNS...)
	withSANs.IPs = append(withSANs.IPs, net.ParseIP("192.168.1.1"))
	newIP := apiServer
	newIP.IPs = append(newIP.IPs, net.ParseIP("10.0.0.99"))
	newIP.DNS = append(newIP.DNS, "api.example.com")
	wrongCN := apiServer
	wrongCN.CN = "kube-scheduler"
	wrongOrg := apiServer
	wrongOrg.Org = []string{"system:masters"}

	const window = 720 * time.Hour
	// A leaf of a CA that expires within the window expires with it.
	shortCA := mustNewCA(t, withValidity(caSpec, 48*time.Hour))
	clamped := mustIssue(t, apiServer, shortCA)
	clampedExpiry := mustParseCert(t, clamped.Cert).NotAfter
	// Issued after good, maybe on the next day: its own end is the one it names.
	short := mustIssue(t, withValidity(apiServer, 24*time.Hour), shortCA)
	shortCert := mustParseCert(t, short.Cert)
	tests := []struct {
		name string
		spec CertSpec
		pair KeyPair
		ca   []byte
		now  time.Time
		want *CheckError
	}{
		{name: "reusable", spec: apiServer, pair: good, ca: ca.Cert, now: issued},
		{name: "extra SANs are fine", spec: apiServer, pair: mustIssue(t, withSANs, ca), ca: ca.Cert, now: issued},
		{name: "lacks SANs", spec: newIP, pair: good, ca: ca.Cert, now: issued,
			want: &CheckError{File: "apiserver.crt", Problems: []string{"lacks DNS SAN api.example.com", "lacks IP SAN 10.0.0.99"}, Renewable: true}},
		{name: "wrong key", spec: apiServer, pair: KeyPair{Cert: good.Cert, Key: mustNewKey(t).pem}, ca: ca.Cert, now: issued,
			want: &CheckError{File: "apiserver.crt", Problems: []string{"key does not match certificate"}}},
		{name: "missing key", spec: apiServer, pair: KeyPair{Cert: good.Cert}, ca: ca.Cert, now: issued,
			want: &CheckError{File: "apiserver.crt", Problems: []string{"apiserver.key is missing"}, Renewable: true}},
		{name: "expired", spec: apiServer, pair: good, ca: ca.Cert, now: cert.NotAfter,
			want: &CheckError{File: "apiserver.crt", Problems: []string{"expired on " + expiry}, Renewable: true}},
		{name: "expiring", spec: apiServer, pair: good, ca: ca.Cert, now: cert.NotAfter.Add(-window + time.Minute),
			want: &CheckError{File: "apiserver.crt", Problems: []string{"expires " + expiry + ", within the renewal window of 720h"}, Renewable: true}},
		{name: "just outside the window", spec: apiServer, pair: good, ca: ca.Cert, now: cert.NotAfter.Add(-window)},
		{name: "clamped to its CA, within the window: no renewal extends it", spec: apiServer, pair: clamped, ca: shortCA.Cert, now: issued},
		{name: "clamped to its CA and expired", spec: apiServer, pair: clamped, ca: shortCA.Cert, now: clampedExpiry,
			want: &CheckError{File: "apiserver.crt", Problems: []string{"expired on " + day(clampedExpiry)}, Renewable: true}},
		{name: "shorter than its CA, within the window", spec: apiServer, pair: short, ca: shortCA.Cert, now: issued,
			want: &CheckError{File: "apiserver.crt", Problems: []string{"expires " + day(shortCert.NotAfter) + ", within the renewal window of 720h"}, Renewable: true}},
		{name: "not yet valid", spec: apiServer, pair: good, ca: ca.Cert, now: cert.NotBefore.Add(-time.Second),
			want: &CheckError{File: "apiserver.crt", Problems: []string{"is not valid before " + cert.NotBefore.UTC().Format(time.RFC3339) + ": check the clock"}}},
		{name: "not signed by the CA", spec: apiServer, pair: good, ca: otherCA.Cert, now: issued,
			want: &CheckError{File: "apiserver.crt", Problems: []string{"is not signed by ca.crt"}}},
		{name: "unreadable CA", spec: apiServer, pair: good, ca: []byte("junk"), now: issued,
			want: &CheckError{File: "apiserver.crt", Problems: []string{"cannot read ca.crt: no PEM certificate found"}}},
		{name: "wrong CN", spec: wrongCN, pair: good, ca: ca.Cert, now: issued,
			want: &CheckError{File: "apiserver.crt", Problems: []string{`wrong CN "kube-apiserver", want "kube-scheduler"`}, Renewable: true}},
		{name: "wrong O", spec: wrongOrg, pair: good, ca: ca.Cert, now: issued,
			want: &CheckError{File: "apiserver.crt", Problems: []string{`wrong O [], want ["system:masters"]`}, Renewable: true}},
		{name: "client certificate where a server one is needed", spec: kubeletClient, pair: mustIssue(t, withUsage(kubeletClient, UsageServer), ca), ca: ca.Cert, now: issued,
			want: &CheckError{File: "apiserver-kubelet-client.crt", Problems: []string{"lacks extended key usage client auth"}, Renewable: true}},
		{name: "a CA as a leaf", spec: withUsage(caSpec, UsageClient), pair: ca, ca: ca.Cert, now: issued,
			want: &CheckError{File: "ca.crt", Problems: []string{"is a CA certificate, want a leaf", "lacks key usage digital signature", "lacks extended key usage client auth"}, Renewable: true}},
		{name: "garbage", spec: apiServer, pair: KeyPair{Cert: []byte("junk"), Key: good.Key}, ca: ca.Cert, now: issued,
			want: &CheckError{File: "apiserver.crt", Problems: []string{"cannot parse certificate: no PEM certificate found"}}},

		{name: "CA", spec: caSpec, pair: ca, now: issued},
		{name: "external CA", spec: caSpec, pair: KeyPair{Cert: ca.Cert}, now: issued},
		{name: "CA of another subject", spec: withUsage(wrongCN, UsageCA), pair: ca, now: issued},
		{name: "CA with the wrong key", spec: caSpec, pair: KeyPair{Cert: ca.Cert, Key: otherCA.Key}, now: issued,
			want: &CheckError{File: "ca.crt", Problems: []string{"key does not match certificate"}}},
		{name: "leaf as a CA", spec: caSpec, pair: good, now: issued,
			want: &CheckError{File: "ca.crt", Problems: []string{"is not a CA certificate", "lacks key usage cert sign"}}},
		{name: "expired CA is not renewable", spec: caSpec, pair: ca, now: mustParseCert(t, ca.Cert).NotAfter,
			want: &CheckError{File: "ca.crt", Problems: []string{"expired on " + day(mustParseCert(t, ca.Cert).NotAfter)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got *CheckError
			err := Check(tt.spec, tt.pair, tt.ca, tt.now, window)
			if err != nil {
				if !errors.As(err, &got) {
					t.Fatalf("Check returned %T %v, want a *CheckError", err, err)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Check (-want +got):\n%s", diff)
			}
		})
	}
}

func withValidity(s CertSpec, d time.Duration) CertSpec {
	s.Validity = d
	return s
}

func withUsage(s CertSpec, u Usage) CertSpec {
	s.Usage = u
	return s
}

func TestCheckErrorMessage(t *testing.T) {
	err := &CheckError{File: "apiserver.crt", Problems: []string{"lacks IP SAN 10.0.0.5", "expired on 2026-12-01"}}
	if got, want := err.Error(), "apiserver.crt: lacks IP SAN 10.0.0.5; expired on 2026-12-01"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestServiceAccountKey(t *testing.T) {
	sa, err := NewServiceAccountKey(config.RSA2048)
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewServiceAccountKey(config.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	derived, err := ServiceAccountPublicKey(sa.Private)
	if err != nil || string(derived) != string(sa.Public) {
		t.Errorf("ServiceAccountPublicKey = %q, %v; want sa.pub", derived, err)
	}
	tests := []struct {
		name string
		sa   ServiceAccountKey
		want string
	}{
		{"matching", sa, ""},
		{"mismatched", ServiceAccountKey{Private: sa.Private, Public: other.Public}, "sa.pub does not match sa.key"},
		{"unreadable pub", ServiceAccountKey{Private: sa.Private, Public: []byte("junk")}, `read "sa.pub": no PEM public key found`},
		{"unreadable key", ServiceAccountKey{Private: []byte("junk"), Public: sa.Public}, `read "sa.key": parse private key: `},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckServiceAccountKey(tt.sa)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if (tt.want == "") != (got == "") || len(got) < len(tt.want) || got[:len(tt.want)] != tt.want {
				t.Errorf("CheckServiceAccountKey = %q, want %q", got, tt.want)
			}
		})
	}
}
