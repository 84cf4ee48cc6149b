package pki

import (
	"bytes"
	"encoding/base64"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
)

func TestWrapKeyOpensOnlyWithTheCAsKey(t *testing.T) {
	for _, alg := range []config.KeyAlgorithm{config.ECDSAP256, config.ECDSAP384, config.RSA2048} {
		t.Run(string(alg), func(t *testing.T) {
			cfg := testConfig(t, func(c *config.ClusterConfiguration) { c.Certificates.KeyAlgorithm = alg })
			spec := CertSpecs(cfg)[0]
			ca, err := NewCA(spec)
			if err != nil {
				t.Fatal(err)
			}
			other, err := NewCA(spec)
			if err != nil {
				t.Fatal(err)
			}
			secret := []byte("0123456789abcdef0123456789abcdef")
			// A bundle's first certificate is the one wrapped to.
			wrapped, err := WrapKey(Bundle(ca.Cert, other.Cert), secret)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(wrapped, secret) {
				t.Fatal("the wrapped key holds the key in the clear")
			}
			got, err := UnwrapKey(ca.Key, wrapped)
			if err != nil || !bytes.Equal(got, secret) {
				t.Fatalf("UnwrapKey = %q, %v; want the key", got, err)
			}
			if _, err := UnwrapKey(other.Key, wrapped); err == nil || !strings.Contains(err.Error(), "another CA") {
				t.Fatalf("UnwrapKey with another CA's key: %v, want it refused", err)
			}
		})
	}
}

func TestBundleFirstHolds(t *testing.T) {
	cfg := testConfig(t, nil)
	r, err := NewRotation(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cas, sa := r.CAs, r.ServiceAccount
	if got := RotatedCAs(cfg); !slices.Equal(got, []string{config.CertCA, config.CertFrontProxyCA, config.CertEtcdCA}) {
		t.Fatalf("RotatedCAs = %v", got)
	}
	for _, name := range RotatedCAs(cfg) {
		if err := Check(CertSpecs(cfg)[slices.IndexFunc(CertSpecs(cfg), func(s CertSpec) bool { return s.Name == name })], cas[name], nil, time.Now(), 0); err != nil {
			t.Fatalf("new %s: %v", name, err)
		}
	}
	if err := CheckServiceAccountKey(sa); err != nil {
		t.Fatal(err)
	}
	old, err := NewCA(CertSpecs(cfg)[0])
	if err != nil {
		t.Fatal(err)
	}
	both := Bundle(old.Cert, cas[config.CertCA].Cert)
	if again := Bundle(both, cas[config.CertCA].Cert, old.Cert); !bytes.Equal(again, both) {
		t.Fatal("Bundle added a certificate the bundle holds")
	}
	if !bytes.Equal(First(both), old.Cert) || !bytes.Equal(First(Bundle(cas[config.CertCA].Cert, both)), cas[config.CertCA].Cert) {
		t.Fatal("First is not the bundle's first certificate")
	}
	if !Holds(both, cas[config.CertCA].Cert) || !Holds(both, old.Cert) || Holds(old.Cert, cas[config.CertCA].Cert) || Holds(both, nil) {
		t.Fatal("Holds is wrong")
	}
	leaf, err := Issue(CertSpecs(cfg)[1], KeyPair{Cert: both, Key: old.Key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !SignedBy(leaf.Cert, both) || SignedBy(leaf.Cert, cas[config.CertCA].Cert) {
		t.Fatal("a leaf issued with a bundle is not signed by its first certificate alone")
	}
}

func TestRotationFiles(t *testing.T) {
	cfg := testConfig(t, nil)
	r, err := NewRotation(cfg)
	if err != nil {
		t.Fatal(err)
	}
	old, err := NewCA(CertSpecs(cfg)[0])
	if err != nil {
		t.Fatal(err)
	}
	files, err := r.Files(old.Cert)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		for _, pair := range r.CAs {
			if bytes.Contains(data, pair.Key) {
				t.Fatalf("%s holds a CA key in the clear", name)
			}
		}
	}
	public, err := PublicRotation(cfg, files)
	if err != nil || !bytes.Equal(public.CAs[config.CertEtcdCA].Cert, r.CAs[config.CertEtcdCA].Cert) || public.CAs[config.CertCA].Key != nil {
		t.Fatalf("PublicRotation = %v, %v", public, err)
	}
	opened, err := OpenRotation(cfg, files, old.Key)
	if err != nil {
		t.Fatal(err)
	}
	for name, pair := range r.CAs {
		if !bytes.Equal(opened.CAs[name].Key, pair.Key) {
			t.Fatalf("%s's key did not come back", name)
		}
	}
	if !bytes.Equal(opened.ServiceAccount.Private, r.ServiceAccount.Private) {
		t.Fatal("the service-account key did not come back")
	}
	if _, err := OpenRotation(cfg, files, r.CAs[config.CertCA].Key); err == nil || !strings.Contains(err.Error(), "ca.key") {
		t.Fatalf("opened with another CA's key: %v", err)
	}
	delete(files, "etcd-ca.crt")
	if _, err := PublicRotation(cfg, files); err == nil || !strings.Contains(err.Error(), "etcd-ca.crt") {
		t.Fatalf("a rotation without etcd-ca.crt: %v", err)
	}
}

// TestKubeconfigCA: a kubeconfig's CA is its current context's cluster's,
// or the one cluster's of one without a context, as cluster-info's.
func TestKubeconfigCA(t *testing.T) {
	cfg := testConfig(t, nil)
	ca, err := NewCA(CertSpecs(cfg)[0])
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA(CertSpecs(cfg)[0])
	if err != nil {
		t.Fatal(err)
	}
	admin, err := IssueKubeconfig(KubeconfigSpecs(cfg)[0], ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	clusterInfo := []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    server: https://10.0.0.5:6443\n    certificate-authority-data: " +
		base64.StdEncoding.EncodeToString(ca.Cert) + "\ncontexts: null\ncurrent-context: \"\"\nusers: null\n")
	for name, data := range map[string][]byte{"admin.conf": admin, "cluster-info": clusterInfo} {
		if got, err := KubeconfigCA(data); err != nil || !bytes.Equal(got, ca.Cert) {
			t.Fatalf("%s: KubeconfigCA = %v", name, err)
		}
		moved, err := WithKubeconfigCA(data, Bundle(ca.Cert, other.Cert))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := KubeconfigCA(moved); err != nil || !bytes.Equal(got, Bundle(ca.Cert, other.Cert)) {
			t.Fatalf("%s: after WithKubeconfigCA, KubeconfigCA = %v", name, err)
		}
	}
}
