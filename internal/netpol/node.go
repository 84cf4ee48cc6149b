package netpol

import (
	"context"
	"fmt"

	"github.com/google/nftables"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// RunInPod runs node's controller as the enforcer's pod does: with the
// pod's service account (client-go's in-cluster configuration, whose
// KUBERNETES_SERVICE_HOST the DaemonSet points at the control-plane
// endpoint), applying to the table of the network namespace the process
// runs in, the node's. userAgent names the client to the API server.
func RunInPod(ctx context.Context, node, userAgent string, opts Options) error {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return fmt.Errorf("the in-cluster client (this runs in the enforcer's pod): %w", err)
	}
	cfg.UserAgent = userAgent
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	apply := func(v []Verdicts) error {
		conn, err := nftables.New()
		if err != nil {
			return err
		}
		return Apply(conn, v)
	}
	return New(client, node, apply, opts).Run(ctx)
}
