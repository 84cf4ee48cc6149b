package app

import (
	"context"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/phases"
)

// newUpgradeCommand is `kubeboot upgrade apply`: move the running control
// plane to what the configuration renders, one verified step at a time.
func newUpgradeCommand(stdout, stderr io.Writer) *cobra.Command {
	opts := &initOptions{output: "text", anyKind: true} // a joined node too
	var timeout time.Duration
	cmd := groupCommand("upgrade", "Upgrade or reconfigure the running control plane")
	apply := &cobra.Command{
		Use:   "apply",
		Short: "Replace each changed manifest in turn (etcd first, after a snapshot), rolling back any component whose new instance is not healthy",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWorkflow(cmd.Context(), opts, stdout, stderr, func(ctx context.Context, s *phases.State) ([]string, error) {
				s.Report.SetPhase("upgrade")
				if err := phases.UpgradeApply(ctx, s, timeout); err != nil {
					return nil, err
				}
				return []string{"upgrade"}, nil
			})
		},
	}
	apply.Flags().StringVar(&opts.configPath, "config", "", "ClusterConfiguration or JoinConfiguration file: the new version or configuration")
	apply.Flags().VarP(&opts.output, "output", "o", "output format: text, or json (one event per line and a final result)")
	apply.Flags().DurationVar(&timeout, "timeout", 0, "how long to wait for each new instance to be healthy, and again for the previous one after a rollback (default: timeouts.controlPlane, which the manifests' probes also use)")
	cmd.AddCommand(apply)
	return cmd
}
