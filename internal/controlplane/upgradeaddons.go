package controlplane

import (
	"context"
	"strings"
	"time"

	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
)

// upgradeClusterObjects moves the cluster's objects to the new release
// once this node's control plane runs it, in the order of kubeadm's
// upgrade apply: upload-config first, the same phase as init's, so that
// kube-system/kubeadm-config names the new kubernetesVersion and
// kubelet-config holds the KubeletConfiguration the new configuration
// renders (the cluster's view that `kubeadm upgrade plan` and a joining
// node read); then the addons (see upgradeAddons). Like kubeadm, it
// uploads the configuration even while another control-plane node still
// runs the previous release. Which other API servers are behind, which the
// addons' move waits for, is read while upload-config applies.
func upgradeClusterObjects(ctx context.Context, s *phases.Node, timeout time.Duration) error {
	var behind []string
	listed := inBackground(func() (err error) {
		behind, err = phases.ControlPlanesBehind(ctx, s)
		return err
	})
	if _, err := (workflow.Runner[*phases.Node]{Phases: []workflow.Phase[*phases.Node]{phases.UploadConfig}}).Run(ctx, s, nil); err != nil {
		_ = listed()
		return err
	}
	if err := listed(); err != nil {
		return err
	}
	return moveAddons(ctx, s, behind, timeout)
}

// upgradeAddons moves the addons (the pod network, CoreDNS and
// kube-proxy) to what the configuration renders, the new release's image
// pins among it, once this node's control plane is upgraded (see
// moveAddons).
func upgradeAddons(ctx context.Context, s *phases.Node, timeout time.Duration) error {
	behind, err := phases.ControlPlanesBehind(ctx, s)
	if err != nil {
		return err
	}
	return moveAddons(ctx, s, behind, timeout)
}

// moveAddons moves the addons all in one pass (see phases.ApplyAddons);
// applies the user's own manifests (addons.manifests) again, as init's
// addon phase does; and waits until the addons are rolled out (not the
// user's workloads). As with kubeadm, the addons move only when every
// control-plane node runs the new API server: while another one, of
// behind (see phases.ControlPlanesBehind), runs an older release, they
// and the user's manifests stay, and the upgrade of the last node moves
// them.
func moveAddons(ctx context.Context, s *phases.Node, behind []string, timeout time.Duration) error {
	if len(behind) > 0 {
		s.Report.Warnf("addons left as they are: %s still run another API server; upgrade apply on the last of them moves the addons and applies addons.manifests", strings.Join(behind, ", "))
		return nil
	}
	applied, err := phases.ApplyAddons(ctx, s)
	if err != nil {
		return err
	}
	return phases.WaitAddonsRolledOut(ctx, s, timeout, applied)
}
