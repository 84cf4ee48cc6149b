package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/controlplane"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/nodelock"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/worker"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
)

// runSpec is what a command's options say about a run. Commands build one
// from their options; nothing changes it once the run has started, the
// configurations in it included (runLocked checks).
type runSpec struct {
	// config is a control-plane node's configuration; nil for a worker's
	// join, whose configuration is worker.
	config  *config.ClusterConfiguration
	root    string // absolute, or empty for the node's own filesystem
	options workflow.Options
	// dryRun is --dry-run itself; options.DryRun also holds for --diff.
	dryRun  bool
	join    *config.Join
	secrets map[string][]byte
	// worker is a worker's join.
	worker *config.WorkerConfiguration
}

// steps runs phases, or an operation, in run, on the data of the workflow
// r describes (onNode, onControlPlaneJoin, onWorker), and returns the
// names of the steps that ran and how the run's result is made: the
// workflow's own result type, from the part every run has.
type steps func(ctx context.Context, r runSpec, run *workflow.Run) ([]string, resultOf, error)

// resultOf makes a run's result from the part every run has.
type resultOf func(workflow.Result) any

// onNode is steps that run do on the control-plane node r configures, with
// the facts phases.NewNode reads from the node; the result says which
// components the run saw healthy.
func onNode(do func(context.Context, *phases.Node) ([]string, error)) steps {
	return onNodeResult(do, func(n *phases.Node, r workflow.Result) any { return n.Result(r) })
}

// onInit is onNode for init and its phases, whose result hands on the
// join command and the certificate key.
func onInit(do func(context.Context, *phases.Node) ([]string, error)) steps {
	return onNodeResult(do, func(n *phases.Node, r workflow.Result) any { return n.InitResult(r) })
}

// onNodeResult is onNode whose result result makes.
func onNodeResult(do func(context.Context, *phases.Node) ([]string, error), result func(*phases.Node, workflow.Result) any) steps {
	return func(ctx context.Context, r runSpec, run *workflow.Run) ([]string, resultOf, error) {
		n, err := r.node(run)
		if err != nil {
			return nil, nil, err
		}
		ran, err := do(ctx, n)
		return ran, func(common workflow.Result) any { return result(n, common) }, err
	}
}

// onControlPlaneJoin is steps that run do on the node joining the control
// plane as r configures.
func onControlPlaneJoin(do func(context.Context, *controlplane.JoinNode) ([]string, error)) steps {
	return func(ctx context.Context, r runSpec, run *workflow.Run) ([]string, resultOf, error) {
		n, err := r.node(run)
		if err != nil {
			return nil, nil, err
		}
		ran, err := do(ctx, &controlplane.JoinNode{Node: n, Join: r.join, Secrets: r.secrets})
		return ran, func(common workflow.Result) any { return n.Result(common) }, err
	}
}

// onWorker is steps that run do on the worker joining as r configures.
func onWorker(do func(context.Context, *worker.Node) ([]string, error)) steps {
	return func(ctx context.Context, r runSpec, run *workflow.Run) ([]string, resultOf, error) {
		if r.worker == nil {
			return nil, nil, &exit.UsageError{Msg: "this joins a worker node: it needs the join's endpoint, --token and --discovery-token-ca-cert-hash, or --discovery-file, or a WorkerConfiguration"}
		}
		ran, err := do(ctx, worker.NewNode(run, r.worker))
		return ran, nil, err
	}
}

// node is the data of run on the control-plane node r configures.
func (r runSpec) node(run *workflow.Run) (*phases.Node, error) {
	if r.config == nil {
		return nil, &exit.UsageError{Msg: "this runs on a control-plane node: it needs a ClusterConfiguration or JoinConfiguration, not a worker's"}
	}
	return phases.NewNode(run, r.config)
}

// failure ends the -o json result of a command that acts on the cluster
// (upgrade cluster, certs rotate-ca), as workflow.Result's fields end a
// node's: the error, if any, and the exit code.
type failure struct {
	Error    string `json:"error,omitempty"`
	ExitCode int    `json:"exitCode"`
}

// failureOf is the failure of err; nil is success.
func failureOf(err error) failure {
	if err == nil {
		return failure{}
	}
	return failure{Error: err.Error(), ExitCode: exit.Code(err)}
}

// reporter prints progress for people to stderr, or JSON events to stdout;
// it redraws in place on a terminal.
func reporter(format outputFormat, stdout, stderr io.Writer) *output.Reporter {
	progress := stderr
	if format.json() {
		progress = stdout
	}
	report := output.NewReporter(progress, format.json())
	if f, ok := progress.(*os.File); ok && !format.json() && term.IsTerminal(int(f.Fd())) {
		width, _, _ := term.GetSize(int(f.Fd()))
		report.SetTerminal(max(width, 1))
	}
	return report
}

// run builds the run's core: an atomic writer, or a dry-run writer that
// prints the manifests, and this machine's processes.
func (d deps) run(r runSpec, report *output.Reporter, stdout io.Writer) *workflow.Run {
	var writer files.Writer = &files.AtomicWriter{Root: r.root, Report: report, KeepOwner: r.keepOwner()}
	if r.options.DryRun {
		var manifests []string
		if r.config != nil {
			manifests = phases.ManifestPaths(r.config)
		}
		writer = &files.DryRunWriter{Root: r.root, Report: report, Stdout: stdout, Manifests: manifests, KeepOwner: r.keepOwner()}
	}
	return &workflow.Run{Files: writer, Report: report, Stdout: stdout, Options: r.options, System: d.system}
}

// node is the data of a run outside execute (a command that only reads,
// or lab down) on the control-plane node r configures.
func (d deps) node(r runSpec, report *output.Reporter, stdout io.Writer) (*phases.Node, error) {
	return r.node(d.run(r, report, stdout))
}

// configurations are the run's configurations as JSON, to tell that a run
// left them as loaded.
func (r runSpec) configurations() []byte {
	data, err := json.Marshal([]any{r.config, r.join, r.worker})
	if err != nil {
		return []byte(err.Error())
	}
	return data
}

// keepOwner are the directories whose owner a phase sets (through
// Chown) to another user than root: the local etcd's data dir, which is
// security.etcdDataDirOwner's.
func (r runSpec) keepOwner() []string {
	if r.config == nil || r.config.Etcd.Local == nil {
		return nil
	}
	return []string{filepath.Clean(r.config.Etcd.Local.DataDir)}
}

// lock takes the node lock, so that no other kubeboot changes the node
// while this run does; a dry run changes nothing and takes none. The lock
// is the node's, at one place under --root whatever the configuration
// says, and its path resolves inside --root.
func (r runSpec) lock() (*nodelock.Lock, error) {
	if r.options.DryRun {
		return nil, nil
	}
	args := append([]string{filepath.Base(os.Args[0])}, redactArgs(os.Args[1:])...)
	return nodelock.Acquire(r.root, nodelock.File, strings.Join(args, " "))
}

// secretFlags take a secret as their value.
var secretFlags = []string{"--token"}

// redactArgs is a command line without the values of secretFlags: the node
// lock shows its holder's command line to every other run.
func redactArgs(args []string) []string {
	out := slices.Clone(args)
	for i := 0; i < len(out); i++ {
		for _, flag := range secretFlags {
			switch {
			case out[i] == flag && i+1 < len(out):
				i++
				out[i] = "<hidden>"
			case strings.HasPrefix(out[i], flag+"="):
				out[i] = flag + "=<hidden>"
			}
		}
	}
	return out
}

// execute runs the steps until the context ends (Main's, at SIGINT or
// SIGTERM) and, with -o json, prints the final result whether or not they
// succeeded. load builds the run; its failure (a bad config) is reported
// like any other. Every step runs under the node lock. After a signal, the
// steps get d.interruptGrace to return; then execute returns without them
// (and a second signal ends the process at once: see Main).
func (d deps) execute(ctx context.Context, format outputFormat, stdout, stderr io.Writer, load func() (runSpec, error), do steps) error {
	report := reporter(format, stdout, stderr)
	finished := make(chan outcome, 1)
	go func() { finished <- d.runLocked(ctx, report, stdout, load, do) }()
	var out outcome
	select {
	case out = <-finished:
	case <-ctx.Done():
		select {
		case out = <-finished:
		case <-time.After(d.interruptGrace):
			err := fmt.Errorf("interrupted: a step did not stop within %s of the signal", d.interruptGrace)
			out = outcome{err: err, common: workflow.Result{Phases: []string{}, Healthy: []string{}, Changes: files.Changes{Written: []string{}, Unchanged: []string{}}}}
		}
	}
	if out.err != nil {
		out.common.Error, out.common.ExitCode = out.err.Error(), exit.Code(out.err)
	}
	result := any(out.common)
	if out.result != nil {
		result = out.result(out.common)
	}
	report.PrintResult(result)
	if init, ok := result.(phases.InitResult); ok && out.err == nil && !format.json() {
		if init.JoinCommand != "" {
			// The product of a joinable control plane, on stdout only: it
			// holds the bootstrap token, which no progress line shows.
			_, _ = fmt.Fprintln(stdout, init.JoinCommand)
		}
		if init.CertificateKey != "" {
			// Likewise: it opens the kubeadm-certs Secret.
			_, _ = fmt.Fprintln(stdout, "certificate key (join --control-plane --certificate-key; the kubeadm-certs Secret expires in 2h):", init.CertificateKey)
		}
	}
	return out.err
}

// outcome is what a run ends with: its error, the part of its result
// every run has, and how its workflow makes its result of that (nil: the
// common part is the result).
type outcome struct {
	err    error
	common workflow.Result
	result resultOf
}

// runLocked loads the run, takes the node lock and runs the steps. The
// steps must leave the configuration as loaded: what a run learns is data
// of the run, so a change is a bug, and fails the run.
func (d deps) runLocked(ctx context.Context, report *output.Reporter, stdout io.Writer, load func() (runSpec, error), do steps) outcome {
	r, err := load()
	var lock *nodelock.Lock
	var run *workflow.Run
	if err == nil {
		run = d.run(r, report, stdout)
		// A guarantee the configuration gives up on purpose is said
		// at every run, never silently.
		if r.config != nil {
			for _, insecure := range r.config.InsecureOverrides() {
				report.Warnf("security.allowInsecure: %s", insecure)
			}
		}
		lock, err = r.lock()
	}
	var ran []string
	var result resultOf
	if err == nil {
		loaded := r.configurations()
		ran, result, err = do(ctx, r, run)
		if now := r.configurations(); !bytes.Equal(loaded, now) {
			err = errors.Join(err, fmt.Errorf("kubeboot changed its configuration while it ran, which is a bug: please report it (loaded %s; now %s)", loaded, now))
		}
	}
	if lock != nil {
		if released := lock.Release(); err == nil {
			err = released
		}
	}
	common := workflow.Result{OK: err == nil, DryRun: r.dryRun, Phases: nonNil(ran)}
	if run != nil {
		common.Changes = run.Files.Changes()
	}
	common.Written, common.Unchanged = nonNil(common.Written), nonNil(common.Unchanged)
	if result == nil {
		common.Healthy = []string{}
	}
	return outcome{err: err, common: common, result: result}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
