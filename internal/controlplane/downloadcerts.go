package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/kubeadmcerts"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
)

// DownloadCerts fetches the cluster secrets from the kubeadm-certs Secret
// with join.certificateKey, as kubeadm's download-certs does: it discovers
// the cluster with join.discovery (the token and the CA's pins), reads the
// Secret as the bootstrap token, decrypts it and hands the files to
// certs-import, as a bundle would be. Without a certificate key, or on a
// node that holds the cluster CA's key already (a re-run, after the Secret
// may have expired), it does nothing.
var DownloadCerts = workflow.Phase[*JoinNode]{
	Name:     "download-certs",
	Short:    "Fetch the cluster secrets from the kubeadm-certs Secret with join.certificateKey",
	LiveOnly: true,
	Run:      runDownloadCerts,
}

func runDownloadCerts(ctx context.Context, s *JoinNode) error {
	if s.Join == nil || s.Join.CertificateKey == "" || s.Secrets != nil {
		return nil
	}
	caKey := s.Config.KeyPath(config.CertCA)
	if _, err := s.Files.ReadFile(caKey); err == nil {
		s.Report.Infof("%s is on this node: the cluster secrets are here already", caKey)
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %q: %w", caKey, err)
	}
	key, err := kubeadmcerts.ParseKey(s.Join.CertificateKey)
	if err != nil {
		return &exit.UsageError{Msg: "join.certificateKey: " + err.Error()}
	}
	c, err := phases.Discover(ctx, s.Run, *s.Join.Discovery, config.DefaultDiscoveryTimeout)
	if err != nil {
		return err
	}
	kubeconfig, err := phases.BootstrapKubeconfig(c)
	if err != nil {
		return err
	}
	client, err := phases.NewClient(kubeconfig, "")
	if err != nil {
		return fmt.Errorf("build the API client of token %s: %w", c.Token.ID, err)
	}
	secret, err := client.CoreV1().Secrets(bootstraptoken.Namespace).Get(ctx, kubeadmcerts.SecretName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("the cluster has no Secret %s/%s: it expires two hours after `kubeboot init phase upload-certs --upload-certs` (or kubeadm's) stored it; run that on a control-plane node again", bootstraptoken.Namespace, kubeadmcerts.SecretName)
	case err != nil:
		return fmt.Errorf("read Secret %s/%s as token %s: %w", bootstraptoken.Namespace, kubeadmcerts.SecretName, c.Token.ID, err)
	}
	var names []string
	for _, f := range phases.SharedFiles(s.Config) {
		names = append(names, f.Name)
	}
	files, err := kubeadmcerts.Open(key, secret.Data, names)
	if err != nil {
		return err
	}
	s.Secrets = files
	s.Report.Infof("fetched %d files of the cluster secrets from Secret %s/%s", len(files), bootstraptoken.Namespace, kubeadmcerts.SecretName)
	return nil
}
