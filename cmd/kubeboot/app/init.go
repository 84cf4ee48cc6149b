package app

import (
	"context"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/controlplane"
	"github.com/kubeboot/kubeboot/internal/workflow"
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
	// uploadCerts is --upload-certs.
	uploadCerts bool
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
	return runSpec{config: cfg, root: root, dryRun: o.dryRun, options: workflow.Options{
		DryRun:                o.dryRun || o.diff,
		Diff:                  o.diff,
		Renew:                 o.renew,
		Offline:               root != "",
		Strict:                o.preflight.strict,
		IgnorePreflightErrors: o.preflight.ignored(),
		UploadCerts:           o.uploadCerts,
		ConfigFile:            absConfig(o.configPath),
	}}, nil
}

func newInitCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	opts := &initOptions{deps: d}
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Bootstrap this node's control plane: " + strings.Join(phases.InitWorkflow.Names(), ", "),
		Example: examples(
			"kubeboot init --config cluster.yaml",
			"kubeboot init --config cluster.yaml --dry-run",
			"kubeboot init --config cluster.yaml --upload-certs -o json",
		),
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			load := func() (runSpec, error) {
				if err := phases.InitWorkflow.CheckSkip(opts.skipPhases); err != nil {
					return runSpec{}, err // before the node lock
				}
				return opts.spec()
			}
			return d.execute(cmd.Context(), opts.output, stdout, stderr, load, onInit(func(ctx context.Context, n *phases.Node) ([]string, error) {
				ran, err := phases.InitWorkflow.Run(ctx, n, opts.skipPhases)
				if err != nil {
					return ran, err
				}
				return ran, controlplane.RestartRenewed(ctx, n)
			}))
		},
	}
	flags := cmd.PersistentFlags()
	addConfigFlag(flags, &opts.configPath)
	addDryRunFlag(flags, &opts.dryRun)
	addOutputFlag(flags, &opts.output)
	addRootFlag(flags, &opts.root)
	opts.preflight.add(flags)
	flags.BoolVar(&opts.renew, "renew", false, "re-issue certificates and kubeconfigs that exist but are wrong in a way renewal fixes (missing SAN, within certificates.renewBefore of their end); a whole init then restarts, one at a time, the running components that use them")
	flags.BoolVar(&opts.uploadCerts, "upload-certs", false, "store the cluster secrets in the kubeadm-certs Secret for two hours, encrypted with certificateKey or a new key printed once, for join --control-plane --certificate-key")
	addSkipPhasesFlag(cmd, &opts.skipPhases, phases.InitWorkflow.Names())
	cmd.AddCommand(phaseCommands("init", phaseEntries(phases.InitWorkflow), initPhaseExample, func(name string, sub *cobra.Command) {
		if name == phases.Etcd.Name || name == phases.ControlPlane.Name {
			sub.Flags().BoolVar(&opts.diff, "diff", false, "show a unified diff of each rendered manifest against the one on disk; writes nothing")
		}
		sub.RunE = func(cmd *cobra.Command, _ []string) error {
			return d.execute(cmd.Context(), opts.output, stdout, stderr, opts.spec, onInit(runOne(phases.InitWorkflow, name)))
		}
	}))
	return cmd
}

// addSkipPhasesFlag registers --skip-phases, naming the workflow's phases.
func addSkipPhasesFlag(cmd *cobra.Command, skip *[]string, names []string) {
	cmd.Flags().StringSliceVar(skip, "skip-phases", nil, "phases to skip: "+strings.Join(names, ", "))
}

// phaseEntry is a phase as `kubeboot <workflow> phase` lists it: its name,
// its description and its parts.
type phaseEntry struct {
	name, short string
	parts       []phaseEntry
}

// phaseEntries are the phases of r, for phaseCommands.
func phaseEntries[D workflow.Data](r workflow.Runner[D]) []phaseEntry {
	var entries []phaseEntry
	for _, p := range r.Phases {
		e := phaseEntry{name: p.Name, short: p.Short}
		for _, part := range p.Subphases {
			e.parts = append(e.parts, phaseEntry{name: part.Name, short: part.Short})
		}
		entries = append(entries, e)
	}
	return entries
}

// phaseCommands is `kubeboot <workflow> phase`: one subcommand per phase of
// the workflow, generated from its list. example gives a phase's example
// command lines, given its command path below phase ("certs", "addon
// coredns"); the group's are its first phase's and its last's. wire sets
// each one's flags and RunE, given the phase's name.
func phaseCommands(workflow string, entries []phaseEntry, example func(string) []string, wire func(string, *cobra.Command)) *cobra.Command {
	group := groupCommand("phase", "Run one phase of "+workflow+" alone")
	group.Example = examples(append(example(entries[0].name), example(entries[len(entries)-1].name)[0])...)
	for _, p := range entries {
		sub := &cobra.Command{Use: p.name, Short: p.short, Args: usageArgs(cobra.NoArgs), Example: examples(example(p.name)...)}
		wire(p.name, sub)
		for _, part := range p.parts {
			path := strings.ReplaceAll(part.name, "/", " ")
			partCmd := &cobra.Command{Use: strings.TrimPrefix(part.name, p.name+"/"), Short: part.short, Args: usageArgs(cobra.NoArgs), Example: examples(example(path)...)}
			wire(part.name, partCmd)
			sub.AddCommand(partCmd)
		}
		group.AddCommand(sub)
	}
	return group
}

// initPhaseExample is the example of `kubeboot init phase PATH`, with
// --diff for the phases that take it.
func initPhaseExample(path string) []string {
	lines := []string{"kubeboot init phase " + path + " --config cluster.yaml"}
	if path == phases.Etcd.Name || path == phases.ControlPlane.Name {
		lines = append(lines, "kubeboot init phase "+path+" --config cluster.yaml --diff")
	}
	return lines
}

// runOne runs the phase (or subphase) called name of r alone.
func runOne[D workflow.Data](r workflow.Runner[D], name string) func(context.Context, D) ([]string, error) {
	return func(ctx context.Context, d D) ([]string, error) {
		return r.RunOne(ctx, d, name)
	}
}
