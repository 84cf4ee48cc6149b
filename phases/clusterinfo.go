package phases

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/templates"
)

// ClusterInfo publishes the cluster's CA and address in
// kube-public/cluster-info for node join discovery, and lets anonymous
// clients get that one ConfigMap. kubeadm does this inside its
// bootstrap-token phase; kubeboot makes it a phase of its own, so that it
// can be run or skipped alone. The controller-manager's bootstrapsigner
// adds a jws-kubeconfig-<token ID> key per token: kubeboot applies only the
// kubeconfig key, so a re-run neither removes nor fights over those.
var ClusterInfo = Phase[*Node]{
	Name:     "cluster-info",
	Short:    "Publish the cluster's CA and address in kube-public/cluster-info for node join discovery, readable anonymously",
	LiveOnly: true,
	Run:      runClusterInfo,
}

func runClusterInfo(ctx context.Context, s *Node) error {
	path := s.Config.CertPath(config.CertCA)
	ca, err := s.Files.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %q (run `kubeboot init phase certs` first): %w", path, err)
	}
	kubeconfig, err := pki.ClusterInfoKubeconfig(s.Config.ControlPlaneURL(), ca)
	if err != nil {
		return err
	}
	client, err := APIClient(s)
	if err != nil {
		return err
	}
	if err := applyObjects(ctx, s, client, templates.ClusterInfoObjects(kubeconfig)); err != nil {
		return err
	}
	return warnMissingJoinControllers(s)
}

// warnMissingJoinControllers warns when the controller manager, as its
// manifest runs it, leaves off a controller that node join needs.
func warnMissingJoinControllers(s *Node) error {
	path := s.Config.ManifestPath(config.NameControllerManager)
	data, err := s.Files.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // the wait phase names a missing manifest
	}
	if err != nil {
		return fmt.Errorf("read manifest %q: %w", path, err)
	}
	pod, err := DecodePod(path, data)
	if err != nil {
		return err
	}
	if missing := templates.MissingJoinControllers(pod); len(missing) > 0 {
		s.Report.Warnf("%s runs without %s (--controllers): bootstrapsigner signs cluster-info for token discovery, "+
			"without which `join --discovery-token-ca-cert-hash` fails; tokencleaner deletes expired tokens",
			path, strings.Join(missing, ", "))
	}
	return nil
}
