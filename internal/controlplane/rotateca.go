package controlplane

import (
	"context"
	"fmt"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/nodefile"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/pki"
)

// RotateCA is a control-plane node's step of `certs rotate-ca`, with the
// rotation's files (pki.Rotation.Files): the files the step changes
// (phases.TrustRotation, ReissueRotation, DropRotation), then the restart
// of every component, the CSR approver and the kubelet, each waited for
// until a new instance is healthy; or, at the kubelet step, the kubelet's client
// certificate from the new CA (phases.RenewKubeletClientCert) and the
// kubelet's restart. Each step may run again: what is done is left as it
// is, and the restarts prove the node works with it. At the reissue step,
// the node's file (nodeFile), when its certificates.ca is the CA rotated
// out, is moved to the new one (nodefile.ReplaceCA), so that the node's
// next bootstrap takes the node's CA for its own.
func RotateCA(step pki.RotationStep, files map[string][]byte, timeout time.Duration, nodeFile string) workflow.Operation[*phases.Node] {
	return workflow.Operation[*phases.Node]{Name: "certs rotate-ca", Run: func(ctx context.Context, s *phases.Node) error {
		rot, err := pki.PublicRotation(s.Config, files)
		if err != nil {
			return err
		}
		switch step {
		case pki.RotationTrust:
			_, err = phases.TrustRotation(s, rot)
		case pki.RotationReissue:
			if _, err = phases.ReissueRotation(s, files); err == nil {
				err = keepFileCA(s, nodeFile)
			}
		case pki.RotationDrop:
			_, err = phases.DropRotation(s, rot)
		case pki.RotationKubelet:
			return rotateKubelet(ctx, s, rot.CAs[config.CertCA].Cert, timeout)
		default:
			return fmt.Errorf("unknown step %q of a CA rotation: one of %v", step, pki.RotationSteps)
		}
		if err != nil {
			return err
		}
		return restartComponents(ctx, s, append(append([]string(nil), config.ComponentNames...), config.NameCSRApprover, pki.Kubelet))
	}}
}

// rotateKubelet has the node's kubelet hold certificates the new cluster
// CA (ca) signed: its client certificate, and the serving certificate it
// requests of the cluster, if it does (kubeboot issues the one of
// security.verifyKubeletServingCerts, reissued at the reissue step).
func rotateKubelet(ctx context.Context, s *phases.Node, ca []byte, timeout time.Duration) error {
	kubeconfig := s.Config.KubeconfigPath(config.KubeconfigKubelet)
	if _, err := phases.RenewKubeletClientCert(ctx, s.Run, kubeconfig, ca, timeout); err != nil {
		return err
	}
	client, err := phases.KubeletClient(s.Run, kubeconfig)
	if err != nil {
		return err
	}
	servingDir := ""
	if !config.On(s.Config.Security.VerifyKubeletServingCerts) {
		servingDir = phases.KubeletCertDirOf(s.Run, kubeconfig)
		if _, err := phases.DropKubeletServingCert(s.Run, servingDir, ca); err != nil {
			return err
		}
	}
	return phases.RestartKubeletReady(ctx, s.Run, client, s.Config.Node.Name, servingDir, ca, timeout)
}

// keepFileCA moves the certificates.ca of the node's file to the cluster
// CA the node signs with, when it names another.
func keepFileCA(s *phases.Node, nodeFile string) error {
	configured := s.Config.Certificates.CA
	if configured == nil || nodeFile == "" {
		return nil
	}
	cert, err := s.Files.ReadFile(s.Config.CertPath(config.CertCA))
	if err != nil {
		return err
	}
	key, err := s.Files.ReadFile(s.Config.KeyPath(config.CertCA))
	if err != nil {
		return err
	}
	next := config.CertificateAuthority{Cert: string(pki.First(cert)), Key: string(key)}
	if *configured == next {
		return nil
	}
	changed, err := nodefile.ReplaceCA(nodeFile, *configured, next)
	if changed {
		s.Report.Infof("%s: certificates.ca is the new cluster CA", nodeFile)
	}
	return err
}
