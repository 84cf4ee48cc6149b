package phases

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/discovery"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/templates"
)

// ClusterInfo publishes the cluster's CA and address in
// kube-public/cluster-info for node join discovery, and lets anonymous
// clients get that one ConfigMap. kubeadm does this inside its
// bootstrap-token phase; kubeboot makes it a phase of its own, so that it
// can be run or skipped alone. The controller-manager's bootstrapsigner
// keeps a jws-kubeconfig-<token ID> key per token that may sign; kubeboot
// writes the same signatures of init's own tokens at once, bytes for
// bytes, so that nodes discover the cluster as soon as it exists rather
// than once the controller-manager leads and has started its controllers
// (10 s after init on the lab's machines). The signer finds them as it
// would write them and leaves them; its keys of other tokens stay its own.
var ClusterInfo = workflow.Phase[*Node]{
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
	signatures, err := clusterInfoSignatures(ctx, client, kubeconfig)
	if err != nil {
		return err
	}
	if err := applyObjects(ctx, s, client, templates.ClusterInfoObjects(kubeconfig, signatures)); err != nil {
		return err
	}
	return warnMissingJoinControllers(s)
}

// clusterInfoSignatures are cluster-info's signatures, keyed as the
// bootstrapsigner keys them, by init's tokens (its own or its
// configuration's) that may sign and have not expired. Other tokens, such
// as `token create`'s, are the bootstrapsigner's alone: were kubeboot to
// take a share of their keys, a converged re-run would change cluster-info.
func clusterInfoSignatures(ctx context.Context, client kubernetes.Interface, kubeconfig []byte) (map[string]string, error) {
	secrets, err := client.CoreV1().Secrets(bootstraptoken.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "type=" + string(bootstraptoken.SecretType)})
	if err != nil {
		return nil, fmt.Errorf("list the bootstrap tokens that sign cluster-info: %w", err)
	}
	now := time.Now()
	signatures := map[string]string{}
	for i := range secrets.Items {
		info, err := bootstraptoken.FromSecret(&secrets.Items[i])
		switch {
		case err != nil || info.CreatedBy != CreatedByInit && info.CreatedBy != CreatedByInitConfig:
			continue // not init's
		case !slices.Contains(info.Usages, bootstraptoken.UsageSigning) || !info.Expires.IsZero() && !info.Expires.After(now):
			continue // the bootstrapsigner does not sign with it either
		}
		signatures[discovery.SignatureKeyPrefix+info.Token.ID] = discovery.SignJWS(kubeconfig, info.Token)
	}
	return signatures, nil
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
