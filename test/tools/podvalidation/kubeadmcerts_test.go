package podvalidation

import (
	"bytes"
	"context"
	"crypto/rand"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	kubeadmapi "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm"
	"k8s.io/kubernetes/cmd/kubeadm/app/phases/copycerts"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/kubeadmcerts"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

// kubeadmFiles are the files kubeadm's download-certs writes: kubeboot's
// cluster secrets but the encryption config, which kubeadm does not share.
var kubeadmFiles = []string{"ca.crt", "ca.key", "etcd/ca.crt", "etcd/ca.key", "front-proxy-ca.crt", "front-proxy-ca.key", "sa.key", "sa.pub"}

// clusterSecrets are the cluster secrets of a node on which kubeboot's
// certs phase ran.
func clusterSecrets(t *testing.T) map[string][]byte {
	t.Helper()
	s := phasestest.NewNode(t, t.TempDir(), config.DefaultKubernetesVersion)
	if err := phasestest.Run(s, phases.Certs); err != nil {
		t.Fatal(err)
	}
	files, err := phases.ClusterSecrets(s)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestKubeadmDownloadsKubebootsCerts: kubeadm's own download-certs (v1.36.3,
// what `kubeadm join --control-plane --certificate-key` runs) reads the
// kubeadm-certs Secret kubeboot builds with the key and writes every file
// it needs, byte for byte as kubeboot has them.
func TestKubeadmDownloadsKubebootsCerts(t *testing.T) {
	files := clusterSecrets(t)
	hexKey, err := kubeadmcerts.Generate(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key, err := kubeadmcerts.ParseKey(hexKey)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := kubeadmcerts.Seal(key, files, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	owner := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-abcdef", Namespace: "kube-system", UID: "uid-1"}}
	client := fake.NewClientset(kubeadmcerts.Secret(sealed, owner))
	dir := t.TempDir()
	cfg := &kubeadmapi.InitConfiguration{ClusterConfiguration: kubeadmapi.ClusterConfiguration{CertificatesDir: dir}}
	if err := copycerts.DownloadCerts(client, cfg, hexKey); err != nil {
		t.Fatalf("kubeadm's download-certs: %v", err)
	}
	for _, name := range kubeadmFiles {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, files[name]) {
			t.Errorf("kubeadm wrote %s: %v, not kubeboot's file", name, err)
		}
	}
}

// TestKubebootOpensKubeadmsCerts: the Secret kubeadm's own upload-certs
// stores opens with kubeboot's kubeadmcerts to the files kubeadm read, and
// its Role and owner are kubeboot's too.
func TestKubebootOpensKubeadmsCerts(t *testing.T) {
	files := clusterSecrets(t)
	dir := t.TempDir()
	for _, name := range kubeadmFiles {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), files[name], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	hexKey, err := copycerts.CreateCertificateKey()
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	cfg := &kubeadmapi.InitConfiguration{ClusterConfiguration: kubeadmapi.ClusterConfiguration{CertificatesDir: dir}}
	if err := copycerts.UploadCerts(client, cfg, hexKey); err != nil {
		t.Fatalf("kubeadm's upload-certs: %v", err)
	}
	ctx := context.Background()
	secret, err := client.CoreV1().Secrets("kube-system").Get(ctx, kubeadmcerts.SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key, err := kubeadmcerts.ParseKey(hexKey)
	if err != nil {
		t.Fatalf("kubeadm's key: %v", err)
	}
	opened, err := kubeadmcerts.Open(key, secret.Data, slices.Collect(maps.Keys(files)))
	if err != nil {
		t.Fatal(err)
	}
	want := maps.Clone(files)
	maps.DeleteFunc(want, func(name string, _ []byte) bool { return !slices.Contains(kubeadmFiles, name) })
	if !maps.EqualFunc(opened, want, bytes.Equal) {
		t.Errorf("kubeboot opened %v from kubeadm's Secret, want %v", slices.Sorted(maps.Keys(opened)), slices.Sorted(maps.Keys(want)))
	}
	token, err := client.CoreV1().Secrets("kube-system").Get(ctx, secret.OwnerReferences[0].Name, metav1.GetOptions{})
	if err != nil || string(token.Data["description"]) != kubeadmcerts.TokenDescription {
		t.Errorf("kubeadm's owner token %v, %v: description %q, want kubeboot's %q", token, err, token.Data["description"], kubeadmcerts.TokenDescription)
	}
	role, binding := kubeadmcerts.RBAC()
	theirRole, err := client.RbacV1().Roles("kube-system").Get(ctx, kubeadmcerts.RoleName, metav1.GetOptions{})
	if err != nil || !slices.EqualFunc(theirRole.Rules, role.Rules, func(a, b rbacv1.PolicyRule) bool { return a.String() == b.String() }) {
		t.Errorf("kubeadm's Role %v, %v; kubeboot's rules %v", theirRole, err, role.Rules)
	}
	theirBinding, err := client.RbacV1().RoleBindings("kube-system").Get(ctx, kubeadmcerts.RoleName, metav1.GetOptions{})
	if err != nil || !slices.Equal(theirBinding.Subjects, binding.Subjects) || theirBinding.RoleRef != binding.RoleRef {
		t.Errorf("kubeadm's RoleBinding %v, %v; kubeboot's %v", theirBinding, err, binding)
	}
}
