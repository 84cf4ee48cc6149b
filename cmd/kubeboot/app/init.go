package app

import (
	"context"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/phases"
)

// initOptions are the flags of `kubeboot init` and of its phase subcommands.
type initOptions struct {
	deps       deps
	configPath string
	root       string
	output     outputFormat
	dryRun     bool
	renew      bool
	preflight  preflightFlags
	skipPhases []string
	// diff is `init phase etcd|control-plane --diff`.
	diff bool
}

// spec loads the configuration into the runSpec the options describe.
func (o *initOptions) spec() (runSpec, error) {
	root, err := absRoot(o.root)
	if err != nil {
		return runSpec{}, err
	}
	cfg, err := o.deps.loadCluster(o.configPath)
	if err != nil {
		return runSpec{}, err
	}
	if err := config.CheckPatchesDir(cfg, o.configPath, root); err != nil {
		return runSpec{}, err
	}
	return runSpec{config: cfg, root: root, dryRun: o.dryRun, options: phases.Options{
		DryRun:                o.dryRun || o.diff,
		Diff:                  o.diff,
		Renew:                 o.renew,
		Offline:               root != "",
		Strict:                o.preflight.strict,
		IgnorePreflightErrors: o.preflight.ignored(),
	}}, nil
}

func newInitCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	opts := &initOptions{deps: d}
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Bootstrap this node's control plane: " + strings.Join(phases.Init.Names(), ", "),
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			load := func() (runSpec, error) {
				if err := phases.Init.CheckSkip(opts.skipPhases); err != nil {
					return runSpec{}, err // before the node lock
				}
				return opts.spec()
			}
			return d.execute(cmd.Context(), opts.output, stdout, stderr, load, func(ctx context.Context, s *phases.State) ([]string, error) {
				return phases.Init.Run(ctx, s, opts.skipPhases)
			})
		},
	}
	flags := cmd.PersistentFlags()
	addConfigFlag(flags, &opts.configPath)
	addDryRunFlag(flags, &opts.dryRun)
	addOutputFlag(flags, &opts.output)
	addRootFlag(flags, &opts.root)
	opts.preflight.add(flags)
	flags.BoolVar(&opts.renew, "renew", false, "re-issue certificates and kubeconfigs that exist but are wrong in a way renewal fixes (missing SAN, near expiry)")
	addSkipPhasesFlag(cmd, &opts.skipPhases, phases.Init)
	cmd.AddCommand(phaseCommands("init", phases.Init, func(p phases.Phase, sub *cobra.Command) {
		if p.Name == phases.Etcd.Name || p.Name == phases.ControlPlane.Name {
			sub.Flags().BoolVar(&opts.diff, "diff", false, "show a unified diff of each rendered manifest against the one on disk; writes nothing")
		}
		sub.RunE = func(cmd *cobra.Command, _ []string) error {
			return d.execute(cmd.Context(), opts.output, stdout, stderr, opts.spec, runOne(phases.Init, p.Name))
		}
	}))
	return cmd
}

// addSkipPhasesFlag registers --skip-phases, naming the workflow's phases.
func addSkipPhasesFlag(cmd *cobra.Command, skip *[]string, workflow phases.Runner) {
	cmd.Flags().StringSliceVar(skip, "skip-phases", nil, "phases to skip: "+strings.Join(workflow.Names(), ", "))
}

// phaseCommands is `kubeboot <workflow> phase`: one subcommand per phase of
// the workflow, generated from its list. wire sets each one's flags and
// RunE.
func phaseCommands(workflow string, r phases.Runner, wire func(phases.Phase, *cobra.Command)) *cobra.Command {
	group := groupCommand("phase", "Run one phase of "+workflow+" alone")
	for _, p := range r.Phases {
		sub := &cobra.Command{Use: p.Name, Short: p.Short, Args: usageArgs(cobra.NoArgs)}
		wire(p, sub)
		for _, part := range p.Subphases {
			partCmd := &cobra.Command{Use: strings.TrimPrefix(part.Name, p.Name+"/"), Short: part.Short, Args: usageArgs(cobra.NoArgs)}
			wire(part, partCmd)
			sub.AddCommand(partCmd)
		}
		group.AddCommand(sub)
	}
	return group
}

// runOne runs the phase (or subphase) called name of r alone.
func runOne(r phases.Runner, name string) steps {
	return func(ctx context.Context, s *phases.State) ([]string, error) {
		return r.RunOne(ctx, s, name)
	}
}
