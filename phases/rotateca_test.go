package phases_test

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
	"github.com/kubeboot/kubeboot/pki"
)

// TestRotationSteps takes a node's PKI through trust, reissue and drop,
// and after each step has init's certs and kubeconfig phases accept what
// is on disk unchanged: a reboot's converging run mid-rotation keeps it.
func TestRotationSteps(t *testing.T) {
	root := t.TempDir()
	s := phasestest.NewNode(t, root, config.DefaultKubernetesVersion)
	if err := phasestest.Run(s, phases.Certs, phases.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	old := phasestest.ClusterCA(t, s)
	oldSA := phasestest.HostFile(t, s, s.Config.PublicKeyPath(config.KeyServiceAccount))
	rot, err := pki.NewRotation(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	files, err := rot.Files(old.Cert)
	if err != nil {
		t.Fatal(err)
	}
	public, err := pki.PublicRotation(s.Config, files)
	if err != nil {
		t.Fatal(err)
	}
	// withCA is the node, its configuration naming ca as certificates.ca,
	// as the first node's file of a fleet does.
	withCA := func(ca pki.KeyPair) *phases.Node {
		t.Helper()
		c := *s.Config
		c.Certificates.CA = &config.CertificateAuthority{Cert: string(ca.Cert), Key: string(ca.Key)}
		n, err := phases.NewNode(phasestest.NewRun(root, output.NewReporter(&bytes.Buffer{}, false)), &c)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	converges := func(step string) {
		t.Helper()
		before := phasestest.Snapshot(t, root)
		if err := phasestest.Run(s, phases.Certs, phases.Kubeconfig); err != nil {
			t.Fatalf("after %s, init's certs phase refuses the node: %v", step, err)
		}
		if after := phasestest.Snapshot(t, root); len(after) != len(before) {
			t.Fatalf("after %s, init's certs phase changed the node", step)
		}
		for path, f := range phasestest.Snapshot(t, root) {
			if before[path] != f {
				t.Fatalf("after %s, init's certs phase rewrote %s", step, path)
			}
		}
	}
	caFile := func() []byte { return phasestest.HostFile(t, s, s.Config.CertPath(config.CertCA)) }
	// The controller-manager signs with ca-signer.crt, which takes one
	// certificate: the first of ca.crt.
	signer := func() []byte { return phasestest.HostFile(t, s, s.Config.CertPath(config.CertCASigner)) }
	admin := func() []byte {
		data := phasestest.HostFile(t, s, s.Config.KubeconfigPath(config.KubeconfigAdmin))
		ca, err := pki.KubeconfigCA(data)
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}

	// Trust: the old CA still first and signing, the new one trusted.
	if wrote, err := phases.TrustRotation(s, public); err != nil || !wrote {
		t.Fatalf("TrustRotation = %v, %v", wrote, err)
	}
	if !bytes.Equal(pki.First(caFile()), old.Cert) || !pki.Holds(caFile(), rot.CAs[config.CertCA].Cert) {
		t.Fatal("ca.crt does not hold the old CA first and the new one after it")
	}
	if !bytes.Equal(signer(), old.Cert) {
		t.Fatal("after trust, ca-signer.crt is not the old CA alone")
	}
	if !pki.Holds(admin(), rot.CAs[config.CertCA].Cert) || !bytes.Equal(pki.First(admin()), old.Cert) {
		t.Fatal("admin.conf does not trust both CAs, the old first")
	}
	sa := phasestest.HostFile(t, s, s.Config.PublicKeyPath(config.KeyServiceAccount))
	if !bytes.Equal(pki.First(sa), pki.First(oldSA)) || !pki.Holds(sa, rot.ServiceAccount.Public) {
		t.Fatal("sa.pub does not hold both keys, the old first")
	}
	if wrote, err := phases.TrustRotation(s, public); err != nil || wrote {
		t.Fatalf("TrustRotation again = %v, %v; want nothing written", wrote, err)
	}
	converges("trust")
	if err := phasestest.Run(withCA(old), phases.Certs); err != nil {
		t.Fatalf("after trust, a node whose file names the old CA is refused: %v", err)
	}

	// Drop before reissue is refused.
	if _, err := phases.DropRotation(s, public); err == nil || !strings.Contains(err.Error(), "reissue") {
		t.Fatalf("DropRotation before the reissue: %v", err)
	}

	// Reissue: the new CA first, with its key; every leaf its.
	if wrote, err := phases.ReissueRotation(s, files); err != nil || !wrote {
		t.Fatalf("ReissueRotation = %v, %v", wrote, err)
	}
	if !bytes.Equal(pki.First(caFile()), rot.CAs[config.CertCA].Cert) || !pki.Holds(caFile(), old.Cert) {
		t.Fatal("ca.crt does not hold the new CA first and the old one after it")
	}
	if !bytes.Equal(signer(), rot.CAs[config.CertCA].Cert) {
		t.Fatal("after reissue, ca-signer.crt is not the new CA alone")
	}
	if key := phasestest.HostFile(t, s, s.Config.KeyPath(config.CertCA)); !bytes.Equal(key, rot.CAs[config.CertCA].Key) {
		t.Fatal("ca.key is not the new CA's")
	}
	for _, name := range []string{config.CertAPIServer, config.CertFrontProxyClient, config.CertEtcdServer, config.CertAPIServerEtcdClient} {
		spec := specOf(t, s, name)
		if cert := phasestest.HostFile(t, s, s.Config.CertPath(name)); !pki.SignedBy(cert, rot.CAs[spec.CA].Cert) {
			t.Fatalf("%s is not signed by the new %s", name, spec.CA)
		}
	}
	if cert := pki.KubeconfigCert(phasestest.HostFile(t, s, s.Config.KubeconfigPath(config.KubeconfigAdmin))); !pki.SignedBy(cert, rot.CAs[config.CertCA].Cert) {
		t.Fatal("admin.conf's certificate is not the new CA's")
	}
	if !bytes.Equal(phasestest.HostFile(t, s, s.Config.KeyPath(config.KeyServiceAccount)), rot.ServiceAccount.Private) {
		t.Fatal("sa.key is not the new key")
	}
	if _, err := os.Stat(s.Files.HostPath(phases.RotationStash(s.Config))); err != nil {
		t.Fatalf("no stash of the new keys: %v", err)
	}
	// Again, with the old key gone: from the stash, writing nothing.
	if wrote, err := phases.ReissueRotation(s, files); err != nil || wrote {
		t.Fatalf("ReissueRotation again = %v, %v; want nothing written", wrote, err)
	}
	converges("reissue")
	if err := phasestest.Run(withCA(rot.CAs[config.CertCA]), phases.Certs); err != nil {
		t.Fatalf("after reissue, a node whose file names the new CA is refused: %v", err)
	}
	if err := phasestest.Run(withCA(old), phases.Certs); err == nil || !strings.Contains(err.Error(), "certificates.ca is another CA") {
		t.Fatalf("after reissue, a node whose file names the old CA: %v", err)
	}

	// Drop: the new CA alone, the stash gone.
	if wrote, err := phases.DropRotation(s, public); err != nil || !wrote {
		t.Fatalf("DropRotation = %v, %v", wrote, err)
	}
	if !bytes.Equal(caFile(), rot.CAs[config.CertCA].Cert) || !bytes.Equal(admin(), rot.CAs[config.CertCA].Cert) {
		t.Fatal("ca.crt or admin.conf still trusts the old CA")
	}
	if sa := phasestest.HostFile(t, s, s.Config.PublicKeyPath(config.KeyServiceAccount)); !bytes.Equal(sa, rot.ServiceAccount.Public) {
		t.Fatal("sa.pub still holds the old key")
	}
	if _, err := os.Stat(s.Files.HostPath(phases.RotationStash(s.Config))); !os.IsNotExist(err) {
		t.Fatalf("the stash of the new keys is left: %v", err)
	}
	if wrote, err := phases.DropRotation(s, public); err != nil || wrote {
		t.Fatalf("DropRotation again = %v, %v; want nothing written", wrote, err)
	}
	converges("drop")
}

// TestReissueRotationRefusesAnotherCAsKeys: keys wrapped to another
// cluster's CA do not open, and nothing is written.
func TestReissueRotationRefusesAnotherCAsKeys(t *testing.T) {
	root := t.TempDir()
	s := phasestest.NewNode(t, root, config.DefaultKubernetesVersion)
	if err := phasestest.Run(s, phases.Certs, phases.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	rot, err := pki.NewRotation(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	files, err := rot.Files(rot.CAs[config.CertCA].Cert)
	if err != nil {
		t.Fatal(err)
	}
	before := phasestest.Snapshot(t, root)
	if _, err := phases.ReissueRotation(s, files); err == nil || !strings.Contains(err.Error(), "another CA") {
		t.Fatalf("ReissueRotation with keys wrapped to another CA: %v", err)
	}
	for path, f := range phasestest.Snapshot(t, root) {
		if before[path] != f {
			t.Fatalf("%s changed", path)
		}
	}
}

func specOf(t *testing.T, s *phases.Node, name string) pki.CertSpec {
	t.Helper()
	for _, spec := range pki.CertSpecs(s.Config) {
		if spec.Name == name {
			return spec
		}
	}
	t.Fatalf("no certificate %s", name)
	return pki.CertSpec{}
}
