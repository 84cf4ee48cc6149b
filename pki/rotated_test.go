package pki

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/internal/config"
)

// pairFile is the node path of the kubelet's rotating pair in these tests.
const pairFile = "/var/lib/kubelet/pki/" + KubeletClientFile

// rotatedSet is a converged node whose kubelet.conf names pairFile, which
// holds pair as the kubelet writes it: certificate, then key.
func rotatedSet(t *testing.T, cfg *config.ClusterConfiguration, full Set, pair KeyPair) Set {
	t.Helper()
	spec := KubeconfigSpecs(cfg)[2]
	data, err := RotatedKubeconfig(spec, full.Certs[config.CertCA].Cert, pairFile)
	if err != nil {
		t.Fatal(err)
	}
	have := merge(full, Set{Kubeconfigs: map[string][]byte{spec.Name: data}})
	have.ClientFiles = map[string][]byte{pairFile: slices.Concat(pair.Cert, pair.Key)}
	return have
}

func TestCheckRotatedKubeconfig(t *testing.T) {
	cfg := testConfig(t, nil)
	full := ensureAll(t, cfg)
	specs := KubeconfigSpecs(cfg)
	admin, kubelet := specs[0], specs[2]
	if kubelet.Name != config.KubeconfigKubelet || !kubelet.KubeletRotates || admin.KubeletRotates {
		t.Fatalf("specs[2] is %s (rotates %t), admin rotates %t", kubelet.Name, kubelet.KubeletRotates, admin.KubeletRotates)
	}
	ca := full.Certs[config.CertCA]
	own := mustIssue(t, kubelet.Client, ca)
	expiry := mustParseCert(t, own.Cert).NotAfter
	otherNode := kubelet.Client
	otherNode.CN = "system:node:cp-2"
	otherCA := mustNewCA(t, CertSpecs(cfg)[0])
	noFile := rotatedSet(t, cfg, full, own)
	noFile.ClientFiles = nil
	hint := "the kubelet rotates that certificate, kubeboot does not renew it: to start over, stop the kubelet, remove kubelet.conf and " + pairFile +
		", run `kubeboot init phase kubeconfig` (an embedded certificate), start the kubelet and run `kubeboot init phase kubelet-finalize`"

	tests := []struct {
		name  string
		spec  KubeconfigSpec
		have  Set
		now   time.Time
		wants []string
	}{
		{"the node's own", kubelet, rotatedSet(t, cfg, full, own), time.Now(), nil},
		{"within the renewal window: the kubelet's to renew", kubelet, rotatedSet(t, cfg, full, own), expiry.Add(-time.Hour), nil},
		{"expired", kubelet, rotatedSet(t, cfg, full, own), expiry.Add(time.Hour), []string{"client certificate " + pairFile + ": expired on " + day(expiry), hint}},
		{"another node's", kubelet, rotatedSet(t, cfg, full, mustIssue(t, otherNode, ca)), time.Now(),
			[]string{"client certificate " + pairFile + `: wrong CN "system:node:cp-2", want "system:node:cp-1"`, hint}},
		{"another cluster's", kubelet, rotatedSet(t, cfg, full, mustIssue(t, kubelet.Client, otherCA)), time.Now(),
			[]string{"client certificate " + pairFile + ": is not signed by ca.crt", hint}},
		{"no key", kubelet, rotatedSet(t, cfg, full, KeyPair{Cert: own.Cert}), time.Now(), []string{"client certificate " + pairFile + ": no private key in " + pairFile, hint}},
		{"no file", kubelet, noFile, time.Now(), []string{"client certificate " + pairFile + ": does not exist", hint}},
		{"admin.conf must embed its certificate", admin, rotatedSet(t, cfg, full, own), time.Now(), []string{"embeds no client certificate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := tt.have.Kubeconfigs[config.KubeconfigKubelet]
			err := CheckKubeconfig(tt.spec, data, ca.Cert, tt.have.ClientFiles, tt.now, 720*time.Hour)
			var check *CheckError
			if tt.wants == nil {
				if err != nil {
					t.Fatalf("CheckKubeconfig: %v", err)
				}
				return
			}
			if !errors.As(err, &check) || check.Renewable {
				t.Fatalf("CheckKubeconfig returned %v, want a *CheckError that no renewal fixes", err)
			}
			if diff := cmp.Diff(tt.wants, check.Problems); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRotatedKubeconfigIsTheKubelets: Ensure reuses a kubelet.conf that
// names the kubelet's pair, Expirations and KubeletExpiration report that pair's expiry, and
// Renew never re-issues it, named or not.
func TestRotatedKubeconfigIsTheKubelets(t *testing.T) {
	cfg := testConfig(t, nil)
	full := ensureAll(t, cfg)
	kubelet := KubeconfigSpecs(cfg)[2]
	pair := mustIssue(t, kubelet.Client, full.Certs[config.CertCA])
	have := rotatedSet(t, cfg, full, pair)

	if created, err := Ensure(cfg, have, time.Now(), nil); err != nil || len(written(created)) > 0 {
		t.Errorf("Ensure = %v, %v; want nothing created", written(created), err)
	}
	now := time.Now()
	var found bool
	for _, e := range Expirations(cfg, have, now) {
		if e.Name == config.KubeconfigKubelet {
			found = true
			if e.File != pairFile || !e.NotAfter.Equal(mustParseCert(t, pair.Cert).NotAfter) || e.Err != nil || e.Missing {
				t.Errorf("kubelet.conf's expiration: %+v", e)
			}
		}
	}
	if !found {
		t.Error("Expirations lists no kubelet.conf")
	}
	for _, set := range []Set{full, have} {
		if got, want := KubeletExpiration(cfg, set, now), expirationOf(t, Expirations(cfg, set, now), config.KubeconfigKubelet); got != want {
			t.Errorf("KubeletExpiration = %+v, want Expirations' %+v", got, want)
		}
	}
	for _, names := range [][]string{nil, {config.KubeconfigKubelet}} {
		renewed, err := Renew(cfg, have, time.Now(), names, false)
		if err != nil || len(renewed.Kubeconfigs[config.KubeconfigKubelet]) > 0 {
			t.Errorf("Renew(%v) = %v, %v; want kubelet.conf left alone", names, written(renewed), err)
		}
	}
	if strings.Join(ClientFiles(have.Kubeconfigs[config.KubeconfigKubelet]), ",") != pairFile || ClientFiles(full.Kubeconfigs[config.KubeconfigKubelet]) != nil {
		t.Error("ClientFiles names the wrong files")
	}
}

func TestCheckRotatedPair(t *testing.T) {
	cfg := testConfig(t, nil)
	full := ensureAll(t, cfg)
	kubelet := KubeconfigSpecs(cfg)[2]
	ca := full.Certs[config.CertCA]
	own := mustIssue(t, kubelet.Client, ca)
	if err := CheckRotatedPair(kubelet, pairFile, slices.Concat(own.Cert, own.Key), ca.Cert, time.Now()); err != nil {
		t.Errorf("the node's own pair: %v", err)
	}
	otherNode := kubelet.Client
	otherNode.CN = "system:node:cp-2"
	other := mustIssue(t, otherNode, ca)
	err := CheckRotatedPair(kubelet, pairFile, slices.Concat(other.Cert, other.Key), ca.Cert, time.Now())
	if want := pairFile + `: wrong CN "system:node:cp-2", want "system:node:cp-1"`; err == nil || err.Error() != want {
		t.Errorf("another node's pair: %v, want %s", err, want)
	}
	if err := CheckRotatedPair(kubelet, pairFile, nil, ca.Cert, time.Now()); err == nil || err.Error() != pairFile+": does not exist" {
		t.Errorf("no pair: %v", err)
	}
}

// expirationOf is the Expiration of list named name.
func expirationOf(t *testing.T, list []Expiration, name string) Expiration {
	t.Helper()
	for _, e := range list {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("no expiration of %s", name)
	return Expiration{}
}
