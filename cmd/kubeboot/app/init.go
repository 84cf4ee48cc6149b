package app

import (
	"context"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/phases"
)

// initOptions are the flags of `kubeboot init` and its phase subcommands.
type initOptions struct {
	configPath   string
	dryRun       bool
	skipPhases   []string
	output       outputFormat
	root         string
	strict       bool
	ignoreErrors []string
	diff         bool
	renew        bool
	// join loads a JoinConfiguration instead, and keeps its join part here.
	join       bool
	joinConfig config.Join
	// anyKind loads either kind, for commands that serve every control-plane
	// node however it was made, such as the certs commands.
	anyKind bool
}

func newInitCommand(stdout, stderr io.Writer) *cobra.Command {
	opts := &initOptions{output: "text"}
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Bootstrap this node's control plane: " + strings.Join(phases.Init.Names(), ", "),
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWorkflow(cmd.Context(), opts, stdout, stderr, func(ctx context.Context, s *phases.State) ([]string, error) {
				return phases.Init.Run(ctx, s, opts.skipPhases)
			})
		},
	}
	flags := cmd.PersistentFlags()
	flags.StringVar(&opts.configPath, "config", "", "ClusterConfiguration file (default: the values kubeboot config print-defaults shows)")
	flags.BoolVar(&opts.dryRun, "dry-run", false, "write nothing: report every file, print the manifests to stdout")
	flags.VarP(&opts.output, "output", "o", "output format: text, or json (one event per line and a final result)")
	flags.StringVar(&opts.root, "root", "", "write every file under this directory, keeping node paths in the manifests (offline image builds)")
	flags.BoolVar(&opts.strict, "strict", false, "treat preflight warnings, such as foreign files in the manifest directory, as errors")
	flags.StringSliceVar(&opts.ignoreErrors, "ignore-preflight-errors", nil, "preflight checks to report as warnings only, e.g. Port-6443,EtcdDataDir, or all")
	flags.BoolVar(&opts.renew, "renew", false, "re-issue certificates and kubeconfigs that exist but are wrong in a way renewal fixes (missing SAN, near expiry)")
	cmd.Flags().StringSliceVar(&opts.skipPhases, "skip-phases", nil, "phases to skip: "+strings.Join(phases.Init.Names(), ", "))

	phaseCmd := groupCommand("phase", "Run one phase of init alone")
	for _, p := range phases.Init.Phases {
		sub := &cobra.Command{
			Use:   p.Name,
			Short: p.Short,
			Args:  usageArgs(cobra.NoArgs),
			RunE: func(cmd *cobra.Command, _ []string) error {
				return runWorkflow(cmd.Context(), opts, stdout, stderr, func(ctx context.Context, s *phases.State) ([]string, error) {
					if ran, err := phases.Init.RunOne(ctx, s, p.Name); !ran {
						return nil, err
					}
					return []string{p.Name}, nil
				})
			},
		}
		if p.Name == phases.Etcd.Name || p.Name == phases.ControlPlane.Name {
			sub.Flags().BoolVar(&opts.diff, "diff", false, "show a unified diff of each rendered manifest against the one on disk; writes nothing")
		}
		phaseCmd.AddCommand(sub)
	}
	cmd.AddCommand(phaseCmd)
	return cmd
}

// runWorkflow loads the configuration, builds the run's State, runs the
// phases and, with -o json, prints the final result whether or not they
// succeeded.
func runWorkflow(ctx context.Context, opts *initOptions, stdout, stderr io.Writer, run func(context.Context, *phases.State) ([]string, error)) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	asJSON := opts.output == "json"
	progress := stderr
	if asJSON {
		progress = stdout
	}
	report := phases.NewReporter(progress, asJSON)
	if f, ok := progress.(*os.File); ok && !asJSON && term.IsTerminal(int(f.Fd())) {
		width, _, _ := term.GetSize(int(f.Fd()))
		report.SetTerminal(max(width, 1))
	}
	s, err := newState(opts, report, stdout)
	var ran []string
	if err == nil {
		ran, err = run(ctx, s)
	}
	result := phases.Result{OK: err == nil, DryRun: opts.dryRun, Phases: nonNil(ran), Healthy: []string{}}
	if s != nil {
		result.Changes = s.Files.Changes()
		result.Healthy = nonNil(s.Healthy)
	}
	result.Written, result.Unchanged = nonNil(result.Written), nonNil(result.Unchanged)
	if err != nil {
		result.Error, result.ExitCode = err.Error(), ExitCode(err)
	}
	report.PrintResult(result)
	return err
}

func newState(opts *initOptions, report *phases.Reporter, stdout io.Writer) (*phases.State, error) {
	if opts.root != "" && !filepath.IsAbs(opts.root) {
		abs, err := filepath.Abs(opts.root)
		if err != nil {
			return nil, &phases.UsageError{Msg: "--root " + opts.root + ": " + err.Error()}
		}
		opts.root = abs
	}
	cfg, err := loadConfig(opts)
	if err != nil {
		return nil, err
	}
	var files phases.FileWriter = &phases.AtomicWriter{Root: opts.root, Report: report}
	if opts.dryRun || opts.diff {
		files = &phases.DryRunWriter{Root: opts.root, Report: report, Stdout: stdout, Manifests: phases.ManifestPaths(cfg)}
	}
	var ignore []string
	for _, name := range opts.ignoreErrors {
		ignore = append(ignore, strings.ToLower(name))
	}
	return &phases.State{
		Config: cfg,
		Files:  files,
		Report: report,
		Stdout: stdout,
		Options: phases.Options{
			DryRun:                opts.dryRun || opts.diff,
			Diff:                  opts.diff,
			Renew:                 opts.renew,
			Offline:               opts.root != "",
			Strict:                opts.strict,
			IgnorePreflightErrors: ignore,
		},
	}, nil
}

// loadConfig loads the config kind the command takes.
func loadConfig(opts *initOptions) (*config.ClusterConfiguration, error) {
	if opts.anyKind && opts.configPath != "" {
		return config.LoadAny(opts.configPath, config.DetectHost())
	}
	if !opts.join {
		return config.Load(opts.configPath, config.DetectHost())
	}
	if opts.configPath == "" {
		return nil, &phases.UsageError{Msg: "join needs --config: a JoinConfiguration file"}
	}
	j, err := config.LoadJoin(opts.configPath, config.DetectHost())
	if err != nil {
		return nil, err
	}
	opts.joinConfig = j.Join
	return &j.ClusterConfiguration, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
