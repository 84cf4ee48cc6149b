package phases

import (
	"bytes"
	"context"
	"crypto/rand"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/kubeadmcerts"
	"github.com/kubeboot/kubeboot/internal/workflow"
)

// uploadedSecrets runs upload-certs on a node with a PKI and returns the
// kubeadm-certs Secret opened with hexKey (the run's own key when empty),
// and the cluster secrets on the node.
func uploadedSecrets(t *testing.T, s *Node, client *fake.Clientset, hexKey string) (opened, onNode map[string][]byte) {
	t.Helper()
	ctx := context.Background()
	must(t, runUploadCerts(ctx, s))
	if hexKey == "" {
		hexKey = s.CertificateKey
	}
	key, err := kubeadmcerts.ParseKey(hexKey)
	must(t, err)
	secret, err := client.CoreV1().Secrets("kube-system").Get(ctx, kubeadmcerts.SecretName, metav1.GetOptions{})
	must(t, err)
	onNode, err = ClusterSecrets(s)
	must(t, err)
	opened, err = kubeadmcerts.Open(key, secret.Data, slices.Collect(maps.Keys(onNode)))
	must(t, err)
	owner := secret.OwnerReferences
	if len(owner) != 1 || !strings.HasPrefix(owner[0].Name, bootstraptoken.SecretPrefix) {
		t.Fatalf("kubeadm-certs owned by %+v, want a bootstrap token's Secret", owner)
	}
	tokenSecret, err := client.CoreV1().Secrets("kube-system").Get(ctx, owner[0].Name, metav1.GetOptions{})
	must(t, err)
	info, err := bootstraptoken.FromSecret(tokenSecret)
	must(t, err)
	if left := time.Until(info.Expires); left < 2*time.Hour-time.Minute || left > 2*time.Hour || len(info.Usages) != 0 || info.Description != kubeadmcerts.TokenDescription {
		t.Errorf("owner token %+v: want one that expires in 2h and neither authenticates nor signs", info)
	}
	if _, err := client.RbacV1().RoleBindings("kube-system").Get(ctx, kubeadmcerts.RoleName, metav1.GetOptions{}); err != nil {
		t.Errorf("no RoleBinding %s: %v", kubeadmcerts.RoleName, err)
	}
	return opened, onNode
}

// TestUploadCerts: with certificateKey, the cluster secrets go to the
// kubeadm-certs Secret, encrypted with it, owned by a two-hour token; with
// --upload-certs alone a new key does, for the result only; with neither,
// nothing is uploaded. No key appears in the progress.
func TestUploadCerts(t *testing.T) {
	t.Run("certificateKey", func(t *testing.T) {
		s, client, out := liveState(t, true)
		_, err := (workflow.Runner[*Node]{Phases: []workflow.Phase[*Node]{Certs, APIServerConfig}}).Run(context.Background(), s, nil)
		must(t, err)
		key, err := kubeadmcerts.Generate(rand.Reader)
		must(t, err)
		s.Config.CertificateKey = key
		opened, onNode := uploadedSecrets(t, s, client, key)
		if !maps.EqualFunc(opened, onNode, bytes.Equal) || len(onNode) != 9 {
			t.Errorf("the Secret holds %v, want the node's %v", slices.Collect(maps.Keys(opened)), slices.Collect(maps.Keys(onNode)))
		}
		if s.CertificateKey != "" || strings.Contains(out.String(), key) {
			t.Errorf("the configuration's key went to the result or the progress:\n%s", out)
		}
		// Secrets are encrypted at rest (the default): kubeadm's join, which
		// would not carry the encryption config, is warned off.
		if !strings.Contains(out.String(), "stock `kubeadm join --control-plane` cannot join this cluster") {
			t.Errorf("no warning about kubeadm's join beside encryption at rest:\n%s", out)
		}
	})
	t.Run("--upload-certs", func(t *testing.T) {
		s, client, out := liveState(t, true)
		_, err := (workflow.Runner[*Node]{Phases: []workflow.Phase[*Node]{Certs}}).Run(context.Background(), s, nil)
		must(t, err)
		s.Options.UploadCerts = true
		opened, onNode := uploadedSecrets(t, s, client, "")
		if len(s.CertificateKey) != 64 || !maps.EqualFunc(opened, onNode, bytes.Equal) {
			t.Errorf("key of %d digits; the Secret holds %v, want %v", len(s.CertificateKey), slices.Collect(maps.Keys(opened)), slices.Collect(maps.Keys(onNode)))
		}
		if strings.Contains(out.String(), s.CertificateKey) {
			t.Errorf("the generated key is in the progress:\n%s", out)
		}
	})
	t.Run("without encryption at rest", func(t *testing.T) {
		s, client, out := liveState(t, true)
		*s.Config.Security.EncryptionAtRest.Enabled = false
		_, err := (workflow.Runner[*Node]{Phases: []workflow.Phase[*Node]{Certs}}).Run(context.Background(), s, nil)
		must(t, err)
		s.Options.UploadCerts = true
		uploadedSecrets(t, s, client, "")
		if strings.Contains(out.String(), "kubeadm join") {
			t.Errorf("a warning about kubeadm's join without encryption at rest:\n%s", out)
		}
	})
	t.Run("neither", func(t *testing.T) {
		s, client, _ := liveState(t, false)
		must(t, runUploadCerts(context.Background(), s))
		if list, _ := client.CoreV1().Secrets("kube-system").List(context.Background(), metav1.ListOptions{}); len(list.Items) != 0 {
			t.Errorf("upload-certs without a key stored %d Secrets", len(list.Items))
		}
	})
}
