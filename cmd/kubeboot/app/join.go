package app

import (
	"context"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/exit"
	"github.com/kubeboot/kubeboot/join"
	"github.com/kubeboot/kubeboot/phases"
)

// joinOptions are the flags of `kubeboot join` and its phase subcommands.
type joinOptions struct {
	configPath   string
	output       outputFormat
	preflight    preflightFlags
	skipPhases   []string
	controlPlane bool
	bundle       bundleFlags
}

// spec loads the JoinConfiguration and opens the bundle, if one is given.
func (o *joinOptions) spec() (runSpec, error) {
	if !o.controlPlane {
		return runSpec{}, &exit.UsageError{Msg: "only control-plane nodes can join: pass --control-plane"}
	}
	secrets, err := o.bundle.open()
	if err != nil {
		return runSpec{}, err
	}
	j, err := loadJoin(o.configPath)
	if err != nil {
		return runSpec{}, err
	}
	if err := config.CheckPatchesDir(&j.ClusterConfiguration, o.configPath, ""); err != nil {
		return runSpec{}, err
	}
	return runSpec{config: &j.ClusterConfiguration, join: &j.Join, secrets: secrets, options: phases.Options{
		Strict:                o.preflight.strict,
		IgnorePreflightErrors: o.preflight.ignored(),
	}}, nil
}

// bundleFlags name the certificate bundle a control-plane join imports.
type bundleFlags struct {
	path    string
	keyFile string
}

// add registers --certs-bundle and --key-file.
func (b *bundleFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&b.path, "certs-bundle", "", "the bundle file written by kubeboot certs export")
	cmd.Flags().StringVar(&b.keyFile, "key-file", "", "the file holding the bundle key (64 hex digits)")
}

// open reads and decrypts the bundle, or returns nil without one: a
// re-run uses the CAs on the node.
func (b bundleFlags) open() (map[string][]byte, error) {
	if b.path == "" && b.keyFile == "" {
		return nil, nil
	}
	return openBundle(b.path, b.keyFile)
}

func newJoinCommand(stdout, stderr io.Writer) *cobra.Command {
	opts := &joinOptions{}
	cmd := &cobra.Command{
		Use:   "join --control-plane --config F --certs-bundle B --key-file K",
		Short: "Join this node to a cluster as another control-plane node with a stacked etcd member",
		Long: "join adds this node to a cluster made by `kubeboot init`. It imports the cluster secrets from a bundle\n" +
			"made by `kubeboot certs export`, issues this node's certificates and kubeconfigs, adds its etcd member\n" +
			"as a learner, starts it, promotes it once it has caught up, then starts the API server, controller\n" +
			"manager and scheduler. Re-running it on a joined node changes nothing; a join that stopped halfway\n" +
			"resumes. Phases: " + strings.Join(join.ControlPlane.Names(), ", "),
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return execute(cmd.Context(), opts.output, stdout, stderr, opts.spec, func(ctx context.Context, s *phases.State) ([]string, error) {
				return join.ControlPlane.Run(ctx, s, opts.skipPhases)
			})
		},
	}
	flags := cmd.PersistentFlags()
	addConfigFlag(flags, &opts.configPath)
	addOutputFlag(flags, &opts.output)
	opts.preflight.add(flags)
	addControlPlaneFlag(flags, &opts.controlPlane)
	opts.bundle.add(cmd)
	addSkipPhasesFlag(cmd, &opts.skipPhases, join.ControlPlane)
	cmd.AddCommand(phaseCommands("join", join.ControlPlane, func(p phases.Phase, sub *cobra.Command) {
		opts.bundle.add(sub)
		sub.RunE = func(cmd *cobra.Command, _ []string) error {
			return execute(cmd.Context(), opts.output, stdout, stderr, opts.spec, runOne(join.ControlPlane, p.Name))
		}
	}))
	return cmd
}
