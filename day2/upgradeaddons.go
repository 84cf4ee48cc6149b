package day2

import (
	"context"
	"strings"
	"time"

	"github.com/kubeboot/kubeboot/phases"
)

// upgradeAddons moves CoreDNS and kube-proxy to what the configuration
// renders, the new release's image pins among it, once this node's control
// plane is upgraded, and waits until both are rolled out. As with kubeadm,
// the addons move only when every control-plane node runs the new API
// server: while another one runs an older release, they stay, and the
// upgrade of the last node moves them.
func upgradeAddons(ctx context.Context, s *phases.State, timeout time.Duration) error {
	behind, err := phases.ControlPlanesBehind(ctx, s)
	if err != nil {
		return err
	}
	if len(behind) > 0 {
		s.Report.Warnf("addons left as they are: %s still run another API server; upgrade apply on the last of them moves the addons", strings.Join(behind, ", "))
		return nil
	}
	if _, err := (phases.Runner{Phases: []phases.Phase{phases.Addon}}).Run(ctx, s, nil); err != nil {
		return err
	}
	return phases.WaitAddonsRolledOut(ctx, s, timeout)
}
