package controlplane

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/pki"
)

// Reset is `kubeboot reset`: it undoes init's files on this node (see
// resetNode) and says what it left.
func Reset(opts ResetOptions) workflow.Operation[*phases.Node] {
	return workflow.Operation[*phases.Node]{Name: "reset", Run: func(ctx context.Context, s *phases.Node) error {
		res, err := resetNode(ctx, s, opts)
		for _, left := range res.Left {
			s.Report.Infof("left %s", left)
		}
		return err
	}}
}

// UpgradeApply is `kubeboot upgrade apply` (see upgradeApply); timeout
// bounds each wait, 0 meaning timeouts.controlPlane.
func UpgradeApply(timeout time.Duration) workflow.Operation[*phases.Node] {
	return workflow.Operation[*phases.Node]{Name: "upgrade", Run: func(ctx context.Context, s *phases.Node) error {
		return upgradeApply(ctx, s, timeout)
	}}
}

// UpgradeNode is `kubeboot upgrade node` on a control-plane node after
// the first (see upgradeNode); timeout as UpgradeApply's.
func UpgradeNode(timeout time.Duration) workflow.Operation[*phases.Node] {
	return workflow.Operation[*phases.Node]{Name: "upgrade", Run: func(ctx context.Context, s *phases.Node) error {
		return upgradeNode(ctx, s, timeout)
	}}
}

// CheckRenewNames refuses a name `certs renew` does not know, before the
// command takes the node lock.
func CheckRenewNames(cfg *config.ClusterConfiguration, names []string) error {
	known := append(pki.CertNames(cfg), pki.KubeconfigNames(cfg)...)
	for _, n := range names {
		if !slices.Contains(known, n) {
			return &exit.UsageError{Msg: fmt.Sprintf("unknown certificate or kubeconfig %q: choose from %s", n, strings.Join(known, ", "))}
		}
	}
	return nil
}

// RenewDue is `kubeboot certs renew --due`, what the scheduled renewal
// runs: it renews what is within certificates.renewBefore of its end
// (phases.Due), then restarts the components that use it when restart is
// set, or says which they are; with nothing due it says when the next is.
// With restart, it also restarts each component still running since
// before a file it loads changed (staleRestarts), which an earlier run
// whose restarts failed partway left.
func RenewDue(restart bool) workflow.Operation[*phases.Node] {
	return workflow.Operation[*phases.Node]{Name: "certs renew", Run: func(ctx context.Context, s *phases.Node) error {
		due, next, err := phases.Due(s, time.Now())
		if err != nil {
			return err
		}
		if len(due) > 0 {
			if err := Renew(due, false, restart).Run(ctx, s); err != nil {
				return err
			}
		} else {
			when := "none is left to renew"
			if !next.IsZero() {
				when = "the next comes due on " + next.UTC().Format(time.RFC3339)
			}
			s.Report.Infof("nothing is within certificates.renewBefore (%s) of its end: %s", s.Config.Certificates.RenewBefore.Duration, when)
		}
		if !restart {
			return nil
		}
		return RestartRenewed(ctx, s)
	}}
}

// Renew is `kubeboot certs renew`: it re-issues the named certificates and
// kubeconfigs (none: all) with the existing CAs, new keys too with
// newKeys, then restarts the components that must load them when restart
// is set, or says which they are.
func Renew(names []string, newKeys, restart bool) workflow.Operation[*phases.Node] {
	return workflow.Operation[*phases.Node]{Name: "certs renew", Run: func(ctx context.Context, s *phases.Node) error {
		if err := CheckRenewNames(s.Config, names); err != nil {
			return err
		}
		components, err := phases.RenewCerts(s, names, newKeys)
		if err != nil {
			return err
		}
		approver := s.Config.CSRApproverEnabled() && (names == nil || slices.Contains(names, config.KubeconfigCSRApprover))
		if len(components) == 0 && !approver {
			return nil
		}
		if approver {
			components = append(components, config.NameCSRApprover)
		}
		if !restart {
			s.Report.Infof("restart to load the new certificates: %s (or re-run with --restart)", strings.Join(components, ", "))
			return nil
		}
		return restartComponents(ctx, s, components)
	}}
}
