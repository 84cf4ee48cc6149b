package app

import (
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/day2"
	"github.com/kubeboot/kubeboot/phases"
)

// upgradeOptions are the flags of `kubeboot upgrade apply`.
type upgradeOptions struct {
	deps       deps
	configPath string
	output     outputFormat
	timeout    time.Duration
}

// spec loads the node's new configuration, whichever kind: a joined node upgrades too.
func (o *upgradeOptions) spec() (runSpec, error) {
	cfg, err := o.deps.loadNode(o.configPath)
	if err != nil {
		return runSpec{}, err
	}
	if err := config.CheckPatchesDir(cfg, o.configPath, ""); err != nil {
		return runSpec{}, err
	}
	return runSpec{config: cfg, options: phases.Options{}}, nil
}

// newUpgradeCommand is `kubeboot upgrade apply`: move the running control
// plane to what the configuration renders, one verified step at a time.
func newUpgradeCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	opts := &upgradeOptions{deps: d}
	cmd := groupCommand("upgrade", "Upgrade or reconfigure the running control plane")
	apply := &cobra.Command{
		Use:   "apply",
		Short: "Replace each changed manifest in turn (etcd first, after a snapshot), rolling back any component whose new instance is not healthy",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return d.execute(cmd.Context(), opts.output, stdout, stderr, opts.spec, onNode(day2.UpgradeApply(opts.timeout).Execute))
		},
	}
	addConfigFlag(apply.Flags(), &opts.configPath)
	addOutputFlag(apply.Flags(), &opts.output)
	apply.Flags().DurationVar(&opts.timeout, "timeout", 0, "how long to wait for each new instance to be healthy, and again for the previous one after a rollback (default: timeouts.controlPlane, which the manifests' probes also use)")
	cmd.AddCommand(apply, newUpgradePlanCommand(d, stdout, stderr))
	return cmd
}
