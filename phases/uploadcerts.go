package phases

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/kubeadmcerts"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/templates"
)

// CreatedByUploadCerts marks the token that owns the kubeadm-certs Secret.
const CreatedByUploadCerts = "upload-certs"

// UploadCerts stores the cluster secrets (the CAs with their keys, the
// service-account key pair, the encryption config) in kube-system's
// kubeadm-certs Secret, encrypted with the certificate key, as kubeadm's
// upload-certs phase does: with certificateKey in the configuration, or
// with --upload-certs and a new key, which goes to the run's result only.
// The Secret belongs to a new token that expires in two hours, when the
// cluster deletes both; a Role lets the bootstrap tokens read it. Without
// either, it does nothing: the secrets stay on the node.
var UploadCerts = workflow.Phase[*Node]{
	Name:     "upload-certs",
	Short:    "Store the cluster secrets, encrypted with the certificate key, in the kubeadm-certs Secret for two hours (certificateKey or --upload-certs)",
	LiveOnly: true,
	Run:      runUploadCerts,
}

func runUploadCerts(ctx context.Context, s *Node) error {
	hexKey := s.Config.CertificateKey
	if hexKey == "" && !s.Options.UploadCerts {
		s.Report.Infof("neither certificateKey nor --upload-certs: the cluster secrets stay on this node (join control-plane nodes with a bundle, `kubeboot certs export`)")
		return nil
	}
	if hexKey == "" {
		generated, err := kubeadmcerts.Generate(rand.Reader)
		if err != nil {
			return err
		}
		hexKey, s.CertificateKey = generated, generated
	}
	key, err := kubeadmcerts.ParseKey(hexKey)
	if err != nil {
		return fmt.Errorf("certificateKey: %w", err)
	}
	files, err := ClusterSecrets(s)
	if err != nil {
		return err
	}
	sealed, err := kubeadmcerts.Seal(key, files, rand.Reader)
	if err != nil {
		return err
	}
	client, err := APIClient(s)
	if err != nil {
		return err
	}
	role, binding := kubeadmcerts.RBAC()
	if err := applyObjects(ctx, s, client, templates.Objects{Roles: []*rbacv1.Role{role}, RoleBindings: []*rbacv1.RoleBinding{binding}}); err != nil {
		return err
	}
	token, err := bootstraptoken.Generate(rand.Reader)
	if err != nil {
		return err
	}
	expires := time.Now().Add(kubeadmcerts.TokenTTL)
	owner, err := client.CoreV1().Secrets(bootstraptoken.Namespace).Create(ctx,
		bootstraptoken.Secret(kubeadmcerts.OwnerToken(token, expires, CreatedByUploadCerts)), metav1.CreateOptions{FieldManager: FieldManager})
	if err != nil {
		return fmt.Errorf("create the token that owns %s (%s): %w", kubeadmcerts.SecretName, token, err)
	}
	verb, err := apply(ctx, client.CoreV1().Secrets(bootstraptoken.Namespace), kubeadmcerts.Secret(sealed, owner), nil)
	if err != nil {
		return err
	}
	s.Report.Infof("%s Secret %s/%s: %d files of the cluster secrets, encrypted with the certificate key, until %s (its owner, token %s, expires then)",
		verb, bootstraptoken.Namespace, kubeadmcerts.SecretName, len(files), expires.UTC().Format(time.RFC3339), token.ID)
	if *s.Config.Security.EncryptionAtRest.Enabled {
		s.Report.Warnf("join other control-plane nodes with `kubeboot join --control-plane`: stock `kubeadm join --control-plane` cannot join this cluster, since it writes no %s and its API server could not read the Secrets encrypted at rest (security.encryptionAtRest)",
			config.FileEncryptionConfig)
	}
	return nil
}
