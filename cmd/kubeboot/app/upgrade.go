package app

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/controlplane"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/nodefile"
	"github.com/kubeboot/kubeboot/internal/worker"
	"github.com/kubeboot/kubeboot/internal/workflow"
)

// upgradeOptions are the flags of `kubeboot upgrade apply`.
type upgradeOptions struct {
	deps       deps
	configPath string
	output     outputFormat
	timeout    time.Duration
	// version is --kubernetes-version: the release a control-plane node's
	// file is moved to before the upgrade, as `upgrade cluster` runs it.
	version string
}

// moveFile moves the control-plane node's file to --kubernetes-version,
// when given, before it is loaded.
func (o *upgradeOptions) moveFile() error {
	if o.version == "" {
		return nil
	}
	if _, err := config.ParseKubernetesVersion(o.version); err != nil {
		return &exit.UsageError{Msg: fmt.Sprintf("--kubernetes-version %q: %v", o.version, err)}
	}
	_, err := nodefile.SetKubernetesVersion(o.configPath, o.version)
	return err
}

// spec loads the node's new configuration, whichever kind: a joined node upgrades too.
func (o *upgradeOptions) spec() (runSpec, error) {
	if err := o.moveFile(); err != nil {
		return runSpec{}, err
	}
	cfg, err := o.deps.loadNode(o.configPath)
	if err != nil {
		return runSpec{}, err
	}
	if err := config.CheckPatchesDir(cfg, o.configPath, ""); err != nil {
		return runSpec{}, err
	}
	return runSpec{config: cfg, options: workflow.Options{}}, nil
}

// newUpgradeCommand is `kubeboot upgrade apply`: move the running control
// plane to what the configuration renders, one verified step at a time.
func newUpgradeCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	opts := &upgradeOptions{deps: d}
	cmd := groupCommand("upgrade", "Upgrade or reconfigure the running control plane")
	cmd.Example = examples(
		"kubeboot upgrade plan --config cluster.yaml",
		"kubeboot upgrade apply --config cluster.yaml",
		"kubeboot upgrade node --config worker.yaml",
		"kubeboot upgrade cluster v1.36.3 --kubeconfig admin.conf",
	)
	apply := &cobra.Command{
		Use:   "apply",
		Short: "Replace each changed manifest in turn (etcd first, after a snapshot), rolling back any component whose new instance is not healthy",
		Example: examples(
			"kubeboot upgrade apply --config cluster.yaml",
			"kubeboot upgrade apply --config cluster.yaml --timeout 10m -o json",
		),
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return d.execute(cmd.Context(), opts.output, stdout, stderr, opts.spec, onNode(controlplane.UpgradeApply(opts.timeout).Execute))
		},
	}
	addConfigFlag(apply.Flags(), &opts.configPath)
	addOutputFlag(apply.Flags(), &opts.output)
	addVersionFlag(apply.Flags(), &opts.version)
	apply.Flags().DurationVar(&opts.timeout, "timeout", 0, "how long to wait for each new instance to be healthy, and again for the previous one after a rollback (default: timeouts.controlPlane, which the manifests' probes also use)")
	cmd.AddCommand(apply, newUpgradeNodeCommand(d, stdout, stderr), newUpgradePlanCommand(d, stdout, stderr),
		newUpgradeClusterCommand(d, stdout, stderr), newUpgradeOnNodeCommand(stdout))
	return cmd
}

// addVersionFlag adds --kubernetes-version to upgrade apply and node.
func addVersionFlag(flags *pflag.FlagSet, version *string) {
	flags.StringVar(version, "kubernetes-version", "", "on a control-plane node: first move --config's file to this release, its kubernetesVersion line replaced (or one added after its kind line), every other line kept; as `upgrade cluster` runs it")
}

// nodeSpec loads the configuration of a node after the first, whichever
// kind: a control-plane node's or a worker's.
func (o *upgradeOptions) nodeSpec() (runSpec, error) {
	doc, err := o.deps.load(o.configPath, config.KindJoinConfiguration, config.KindClusterConfiguration, config.KindWorkerConfiguration)
	if err != nil {
		return runSpec{}, err
	}
	if doc.Worker != nil && o.version != "" {
		return runSpec{}, &exit.UsageError{Msg: fmt.Sprintf("%s is a worker's file, which names no release: its kubelet moves to the cluster's; leave --kubernetes-version out", o.configPath)}
	}
	if cfg := doc.ControlPlane(); cfg != nil {
		if err := o.moveFile(); err != nil {
			return runSpec{}, err
		}
		if doc, err = o.deps.load(o.configPath, config.KindJoinConfiguration, config.KindClusterConfiguration); err != nil {
			return runSpec{}, err
		}
		cfg = doc.ControlPlane()
		if err := config.CheckPatchesDir(cfg, o.configPath, ""); err != nil {
			return runSpec{}, err
		}
	}
	return runSpec{config: doc.ControlPlane(), worker: doc.Worker, options: workflow.Options{}}, nil
}

// newUpgradeNodeCommand is `kubeboot upgrade node`: after `upgrade apply`
// on the first control-plane node, every other node moves to the
// cluster's release.
func newUpgradeNodeCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	opts := &upgradeOptions{deps: d}
	cmd := &cobra.Command{
		Use:   "node",
		Short: "After upgrade apply on the first control-plane node, upgrade this one: a control-plane node's static pods as upgrade apply does, then its kubelet; a worker's kubelet configuration from the cluster's kubelet-config and the kubelet restarted through systemd, once the kubelet binary installed passes the version-skew rules",
		Example: examples(
			"kubeboot upgrade node --config join.yaml",
			"kubeboot upgrade node --config worker.yaml",
		),
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			steps := func(ctx context.Context, r runSpec, run *workflow.Run) ([]string, resultOf, error) {
				if r.worker != nil {
					return onWorker(worker.Upgrade(opts.timeout).Execute)(ctx, r, run)
				}
				return onNode(controlplane.UpgradeNode(opts.timeout).Execute)(ctx, r, run)
			}
			return d.execute(cmd.Context(), opts.output, stdout, stderr, opts.nodeSpec, steps)
		},
	}
	addConfigFlag(cmd.Flags(), &opts.configPath)
	addOutputFlag(cmd.Flags(), &opts.output)
	addVersionFlag(cmd.Flags(), &opts.version)
	cmd.Flags().DurationVar(&opts.timeout, "timeout", 0, "how long to wait for each new instance to be healthy, and for the restarted kubelet (default: timeouts.controlPlane on a control-plane node, timeouts.tlsBootstrap on a worker)")
	return cmd
}
