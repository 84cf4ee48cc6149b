package app

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/controlplane"
	"github.com/kubeboot/kubeboot/internal/discovery"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/worker"
	"github.com/kubeboot/kubeboot/internal/workflow"
)

// joinOptions are the flags of `kubeboot join` and its phase subcommands:
// a worker's join, or with controlPlane a control-plane node's.
type joinOptions struct {
	deps         deps
	configPath   string
	output       outputFormat
	preflight    preflightFlags
	skipPhases   []string
	controlPlane bool
	bundle       bundleFlags
	discovery    discoveryFlags
	// endpoint is the ENDPOINT argument of a worker's join.
	endpoint string
	// certificateKey is --certificate-key.
	certificateKey string
}

// spec loads the join's configuration: for a worker, its
// WorkerConfiguration (if any) with the discovery flags over it; for a
// control-plane node, its JoinConfiguration and the bundle, if one is given.
func (o *joinOptions) spec() (runSpec, error) {
	if !o.controlPlane {
		return o.workerSpec()
	}
	if o.discovery.nodeName != "" {
		return runSpec{}, &exit.UsageError{Msg: "--node-name names a worker: a control-plane node's name is its JoinConfiguration's node.name"}
	}
	secrets, err := o.bundle.open()
	if err != nil {
		return runSpec{}, err
	}
	if secrets != nil && o.certificateKey != "" {
		return runSpec{}, &exit.UsageError{Msg: "--certs-bundle and --certificate-key both bring the cluster secrets: pass one"}
	}
	j, err := o.deps.loadJoin(o.configPath, o.discovery.settings(o.endpoint), o.certificateKey)
	if err != nil {
		return runSpec{}, err
	}
	if err := config.CheckPatchesDir(&j.ClusterConfiguration, o.configPath, ""); err != nil {
		return runSpec{}, err
	}
	return runSpec{config: &j.ClusterConfiguration, join: &j.Join, secrets: secrets, options: o.phaseOptions()}, nil
}

// workerSpec loads a worker's join.
func (o *joinOptions) workerSpec() (runSpec, error) {
	if o.bundle.path != "" || o.bundle.keyFile != "" || o.certificateKey != "" {
		return runSpec{}, &exit.UsageError{Msg: "--certs-bundle, --key-file and --certificate-key join a control-plane node: pass --control-plane (a worker needs no cluster secrets)"}
	}
	env := o.deps.configEnv(config.KindWorkerConfiguration)
	env.Worker = &config.WorkerFlags{Discovery: o.discovery.settings(o.endpoint), NodeName: o.discovery.nodeName}
	doc, err := config.Load(o.configPath, env)
	if err != nil {
		return runSpec{}, err
	}
	return workerRunSpec(doc.Worker, o.phaseOptions())
}

// workerRunSpec is the runSpec of a worker's join with w and options.
func workerRunSpec(w *config.WorkerConfiguration, options workflow.Options) (runSpec, error) {
	if f := w.Discovery.File; f != "" {
		if err := discovery.CheckFile(f); err != nil {
			return runSpec{}, err
		}
	}
	return runSpec{worker: w, options: options}, nil
}

func (o *joinOptions) phaseOptions() workflow.Options {
	return workflow.Options{Strict: o.preflight.strict, IgnorePreflightErrors: o.preflight.ignored(), ConfigFile: absConfig(o.configPath)}
}

// names are the phases of the join --control-plane selects.
func (o *joinOptions) names() []string {
	if o.controlPlane {
		return controlplane.JoinWorkflow.Names()
	}
	return worker.JoinWorkflow.Names()
}

// steps run the join --control-plane selects, but for the phases of
// --skip-phases; or, when phase is set, that phase alone.
func (o *joinOptions) steps(phase string) steps {
	if o.controlPlane {
		if phase != "" {
			return onControlPlaneJoin(runOne(controlplane.JoinWorkflow, phase))
		}
		return onControlPlaneJoin(func(ctx context.Context, n *controlplane.JoinNode) ([]string, error) {
			return controlplane.JoinWorkflow.Run(ctx, n, o.skipPhases)
		})
	}
	if phase != "" {
		return onWorker(runOne(worker.JoinWorkflow, phase))
	}
	return onWorker(func(ctx context.Context, n *worker.Node) ([]string, error) {
		return worker.JoinWorkflow.Run(ctx, n, o.skipPhases)
	})
}

// checkSkip refuses a name of --skip-phases that is no phase of the join.
func (o *joinOptions) checkSkip() error {
	if o.controlPlane {
		return controlplane.JoinWorkflow.CheckSkip(o.skipPhases)
	}
	return worker.JoinWorkflow.CheckSkip(o.skipPhases)
}

// phaseSpec is the spec of `join phase NAME`, which must be a phase of
// the join that --control-plane selects.
func (o *joinOptions) phaseSpec(name string) func() (runSpec, error) {
	return func() (runSpec, error) {
		if !slices.Contains(o.names(), name) {
			which := "`kubeboot join --control-plane`: pass --control-plane"
			if o.controlPlane {
				which = "a worker's join, without --control-plane"
			}
			return runSpec{}, &exit.UsageError{Msg: fmt.Sprintf("phase %s is a phase of %s", name, which)}
		}
		return o.spec()
	}
}

// discoveryFlags say how a worker finds and trusts the cluster: they set
// the fields of a WorkerConfiguration of the same meaning.
type discoveryFlags struct {
	token         string
	caCertHashes  []string
	discoveryFile string
	nodeName      string
}

// add registers the worker join's flags.
func (d *discoveryFlags) add(flags *pflag.FlagSet) {
	flags.StringVar(&d.token, "token", "", "the bootstrap token, as kubeboot token create prints it (discovery.token): it verifies the cluster's cluster-info and is the kubelet's TLS bootstrap credential")
	flags.StringSliceVar(&d.caCertHashes, "discovery-token-ca-cert-hash", nil, "pin of the cluster CA, sha256:<hex> of its SubjectPublicKeyInfo, as kubeboot token create --print-join-command prints it (discovery.caCertHashes; repeatable)")
	flags.StringVar(&d.discoveryFile, "discovery-file", "", "a kubeconfig with the cluster's CA and server and the token, as kubeboot token create --discovery-file writes it (discovery.file), instead of ENDPOINT and the pin")
	flags.StringVar(&d.nodeName, "node-name", "", "this node's name (node.name; default: the host name, lower-cased)")
}

// settings are the discovery settings the flags and the endpoint give.
func (d discoveryFlags) settings(endpoint string) config.Discovery {
	s := config.Discovery{APIServerEndpoint: endpoint, Token: d.token, CACertHashes: d.caCertHashes, File: d.discoveryFile}
	if d.discoveryFile != "" {
		if abs, err := filepath.Abs(d.discoveryFile); err == nil {
			s.File = abs
		}
	}
	return s
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

func newJoinCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	opts := &joinOptions{deps: d}
	cmd := &cobra.Command{
		Use:   "join [ENDPOINT] --token T --discovery-token-ca-cert-hash sha256:H | join --discovery-file F | join --control-plane --config F --certs-bundle B --key-file K",
		Short: "Join this node to a cluster made by kubeboot init: as a worker, or with --control-plane as another control-plane node",
		Example: examples(
			"kubeboot join 10.0.0.10:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash sha256:1c3a0c4b7e2e5f8a9d6b3c0e1f2a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a",
			"kubeboot join --discovery-file discovery.conf",
			"kubeboot join --control-plane --config join.yaml --certs-bundle secrets.bundle --key-file bundle.key",
		),
		Long: "join, as `kubeboot token create --print-join-command` prints it, adds this node to the cluster as a worker. It finds\n" +
			"the cluster through ENDPOINT with the bootstrap token, trusting only a CA of the pinned hash (or through a discovery\n" +
			"file), writes the kubelet's configuration and TLS bootstrap credential, starts the kubelet and waits until its Node is\n" +
			"Ready. Phases: " + strings.Join(worker.JoinWorkflow.Names(), ", ") + ".\n\n" +
			"With --control-plane, it adds another control-plane node from a JoinConfiguration. It imports the cluster secrets from\n" +
			"a bundle made by `kubeboot certs export`, issues this node's certificates and kubeconfigs, adds its etcd member\n" +
			"as a learner, starts it, promotes it once it has caught up, then starts the API server, controller\n" +
			"manager and scheduler. Phases: " + strings.Join(controlplane.JoinWorkflow.Names(), ", ") + ".\n\n" +
			"Re-running either on a joined node changes nothing; a join that stopped halfway resumes.",
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.endpoint = firstArg(args)
			load := func() (runSpec, error) {
				if err := opts.checkSkip(); err != nil {
					return runSpec{}, err // before the node lock
				}
				return opts.spec()
			}
			return d.execute(cmd.Context(), opts.output, stdout, stderr, load, opts.steps(""))
		},
	}
	flags := cmd.PersistentFlags()
	addConfigFlag(flags, &opts.configPath)
	addOutputFlag(flags, &opts.output)
	opts.preflight.add(flags)
	addControlPlaneFlag(flags, &opts.controlPlane)
	opts.discovery.add(flags)
	flags.StringVar(&opts.certificateKey, "certificate-key", "", "with --control-plane: fetch the cluster secrets from the kubeadm-certs Secret that init --upload-certs stored, with this key (64 hex digits) and the discovery token; overrides join.certificateKey")
	opts.bundle.add(cmd)
	addSkipPhasesFlag(cmd, &opts.skipPhases, worker.JoinWorkflow.Names())
	cmd.Flags().Lookup("skip-phases").Usage += "; with --control-plane: " + strings.Join(controlplane.JoinWorkflow.Names(), ", ")
	cmd.AddCommand(phaseCommands("join", joinPhases(), joinPhaseExample, func(name string, sub *cobra.Command) {
		opts.bundle.add(sub)
		sub.Use = name + " [ENDPOINT]"
		sub.Args = usageArgs(cobra.MaximumNArgs(1))
		sub.RunE = func(cmd *cobra.Command, args []string) error {
			opts.endpoint = firstArg(args)
			return d.execute(cmd.Context(), opts.output, stdout, stderr, opts.phaseSpec(name), opts.steps(name))
		}
	}))
	return cmd
}

// joinPhases are the phases of both joins, for `join phase NAME`: a name
// both have (preflight, kubelet-config) runs the worker's phase, or with
// --control-plane the control-plane node's.
func joinPhases() []phaseEntry {
	var all []phaseEntry
	controlPlane := phaseEntries(controlplane.JoinWorkflow)
	for _, p := range phaseEntries(worker.JoinWorkflow) {
		p.short += " (worker)"
		for _, cp := range controlPlane {
			if cp.name == p.name {
				p.short = strings.TrimSuffix(p.short, " (worker)") + "; with --control-plane: " + strings.ToLower(cp.short[:1]) + cp.short[1:]
			}
		}
		all = append(all, p)
	}
	for _, cp := range controlPlane {
		if !slices.Contains(worker.JoinWorkflow.Names(), cp.name) {
			cp.short += " (with --control-plane)"
			all = append(all, cp)
		}
	}
	return all
}

// joinPhaseExample is the example of `kubeboot join phase NAME`: on a
// worker, on a node joining the control plane, or both, as the phase runs.
func joinPhaseExample(name string) []string {
	var lines []string
	if slices.Contains(worker.JoinWorkflow.Names(), name) {
		lines = append(lines, "kubeboot join phase "+name+" --config worker.yaml")
	}
	if slices.Contains(controlplane.JoinWorkflow.Names(), name) {
		lines = append(lines, "kubeboot join phase "+name+" --control-plane --config join.yaml")
	}
	return lines
}

// firstArg is the first argument, or "".
func firstArg(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}
