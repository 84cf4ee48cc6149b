package worker

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/pki"
)

// RotateCA is a worker's step of `certs rotate-ca`, with the rotation's
// files (pki.Rotation.Files), of which a worker reads the new cluster CA
// alone: at the trust step its CA file (the kubelet's clientCAFile) and
// kubelet.conf's CA data trust it beside the old; at the kubelet step the
// kubelet's client certificate, and the serving certificate it requests
// of the cluster, come from the new CA; at the drop step both files trust
// the new CA alone. The kubelet restarts after each, and its Node is
// waited for until Ready. A worker has no reissue step: it signs nothing.
func RotateCA(step pki.RotationStep, files map[string][]byte, timeout time.Duration) workflow.Operation[*Node] {
	return workflow.Operation[*Node]{Name: "certs rotate-ca", Run: func(ctx context.Context, s *Node) error {
		ca, err := pki.RotationClusterCA(files)
		if err != nil {
			return err
		}
		kubeconfig := s.Config.KubeconfigPath(config.KubeconfigKubelet)
		servingDir := ""
		switch step {
		case pki.RotationTrust:
			err = s.trustCA(func(cur []byte) []byte { return pki.Bundle(cur, ca) })
		case pki.RotationKubelet:
			if _, err = phases.RenewKubeletClientCert(ctx, s.Run, kubeconfig, ca, timeout); err == nil {
				servingDir = phases.KubeletCertDirOf(s.Run, kubeconfig)
				_, err = phases.DropKubeletServingCert(s.Run, servingDir, ca)
			}
		case pki.RotationDrop:
			err = s.dropOldCA(kubeconfig, ca)
		default:
			return fmt.Errorf("a worker has no step %q of a CA rotation: its steps are %s, %s and %s", step, pki.RotationTrust, pki.RotationKubelet, pki.RotationDrop)
		}
		if err != nil {
			return err
		}
		node, err := phases.KubeletNode(s.Run, kubeconfig)
		if err != nil {
			return err
		}
		client, err := phases.KubeletClient(s.Run, kubeconfig)
		if err != nil {
			return err
		}
		if servingDir != "" && !hasServingCert(s) {
			servingDir = "" // the kubelet serves a certificate of its own
		}
		return phases.RestartKubeletReady(ctx, s.Run, client, node, servingDir, ca, timeout)
	}}
}

// hasServingCert says whether the kubelet requests its serving
// certificate of the cluster: the kubelet's configuration asks for it.
func hasServingCert(s *Node) bool {
	data, err := s.Files.ReadFile(s.Config.Kubelet.ConfigFile)
	return err == nil && bytes.Contains(data, []byte("serverTLSBootstrap: true"))
}

// dropOldCA makes the worker trust ca alone, once its kubelet's client
// certificate is ca's: the kubelet step comes first.
func (s *Node) dropOldCA(kubeconfig string, ca []byte) error {
	data, err := s.Files.ReadFile(kubeconfig)
	if err != nil {
		return fmt.Errorf("read %s: %w", kubeconfig, err)
	}
	cert := pki.KubeconfigCert(data)
	if files := pki.ClientFiles(data); len(files) == 1 {
		if cert, err = s.Files.ReadFile(files[0]); err != nil {
			return fmt.Errorf("read %s: %w", files[0], err)
		}
	}
	if !pki.SignedBy(cert, ca) {
		return fmt.Errorf("the kubelet's client certificate (%s) is not signed by the new CA: the rotation's kubelet step comes before this one", kubeconfig)
	}
	return s.trustCA(func([]byte) []byte { return ca })
}

// trustCA sets the worker's CA file and kubelet.conf's CA data to what
// trust returns for each, writing only what changes.
func (s *Node) trustCA(trust func(cur []byte) []byte) error {
	path := s.Config.CAPath()
	cur, err := s.Files.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if want := trust(cur); !bytes.Equal(want, cur) {
		if err := s.Files.WriteFile(path, want, pki.ModeCert); err != nil {
			return err
		}
		s.Report.Infof("%s trusts %d CA certificates", path, bytes.Count(want, []byte("BEGIN CERTIFICATE")))
	}
	kubeconfig := s.Config.KubeconfigPath(config.KubeconfigKubelet)
	data, err := s.Files.ReadFile(kubeconfig)
	if err != nil {
		return fmt.Errorf("read %s: %w", kubeconfig, err)
	}
	ca, err := pki.KubeconfigCA(data)
	if err != nil {
		return fmt.Errorf("%s: %w", kubeconfig, err)
	}
	want := trust(ca)
	if bytes.Equal(want, ca) {
		return nil
	}
	out, err := pki.WithKubeconfigCA(data, want)
	if err != nil {
		return fmt.Errorf("%s: %w", kubeconfig, err)
	}
	return s.Files.WriteFile(kubeconfig, out, pki.ModeKubeconfig)
}
