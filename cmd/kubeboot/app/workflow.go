package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/exit"
	"github.com/kubeboot/kubeboot/files"
	"github.com/kubeboot/kubeboot/nodelock"
	"github.com/kubeboot/kubeboot/output"
	"github.com/kubeboot/kubeboot/phases"
)

// runSpec is what a command's options say about a run's State. Commands build
// one from their options; nothing changes it once the run has started.
type runSpec struct {
	config  *config.ClusterConfiguration
	root    string // absolute, or empty for the node's own filesystem
	options phases.Options
	// dryRun is --dry-run itself; options.DryRun also holds for --diff.
	dryRun  bool
	join    *config.Join
	secrets map[string][]byte
	// worker is a worker's join; config then holds its node's settings.
	worker *config.WorkerConfiguration
	// lockPath is the node path of the node lock when it is not
	// nodelock.File, the node's: a lab node, one of several on this
	// machine, has one of its own (nodelock.Path).
	lockPath string
}

// steps runs phases, or an operation, on a State and returns the names of
// the steps that ran.
type steps func(ctx context.Context, s *phases.State) ([]string, error)

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

// state builds the run's State: an atomic writer, or a dry-run writer that
// prints the manifests.
func (r runSpec) state(report *output.Reporter, stdout io.Writer) *phases.State {
	var writer files.Writer = &files.AtomicWriter{Root: r.root, Report: report, KeepOwner: r.keepOwner()}
	if r.options.DryRun {
		writer = &files.DryRunWriter{Root: r.root, Report: report, Stdout: stdout, Manifests: phases.ManifestPaths(r.config), KeepOwner: r.keepOwner()}
	}
	return &phases.State{Config: r.config, Files: writer, Report: report, Stdout: stdout, Options: r.options, Join: r.join, Secrets: r.secrets, Worker: r.worker}
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
	path := nodelock.File
	if r.lockPath != "" {
		path = r.lockPath
	}
	args := append([]string{filepath.Base(os.Args[0])}, redactArgs(os.Args[1:])...)
	return nodelock.Acquire(r.root, path, strings.Join(args, " "))
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
	go func() { finished <- runLocked(ctx, report, stdout, load, do) }()
	var out outcome
	select {
	case out = <-finished:
	case <-ctx.Done():
		select {
		case out = <-finished:
		case <-time.After(d.interruptGrace):
			err := fmt.Errorf("interrupted: a step did not stop within %s of the signal", d.interruptGrace)
			out = outcome{err: err, result: phases.Result{Phases: []string{}, Healthy: []string{}, Changes: files.Changes{Written: []string{}, Unchanged: []string{}}}}
		}
	}
	if out.err != nil {
		out.result.Error, out.result.ExitCode = out.err.Error(), exit.Code(out.err)
	}
	report.PrintResult(out.result)
	if out.err == nil && out.result.JoinCommand != "" && !format.json() {
		// The product of a joinable control plane, on stdout only: it
		// holds the bootstrap token, which no progress line shows.
		_, _ = fmt.Fprintln(stdout, out.result.JoinCommand)
	}
	return out.err
}

// outcome is what a run ends with: its error and its final result.
type outcome struct {
	err    error
	result phases.Result
}

// runLocked loads the run, takes the node lock and runs the steps.
func runLocked(ctx context.Context, report *output.Reporter, stdout io.Writer, load func() (runSpec, error), do steps) outcome {
	r, err := load()
	var lock *nodelock.Lock
	var s *phases.State
	if err == nil {
		s = r.state(report, stdout)
		// A guarantee the configuration gives up on purpose is said
		// at every run, never silently.
		for _, insecure := range r.config.InsecureOverrides() {
			report.Warnf("security.allowInsecure: %s", insecure)
		}
		lock, err = r.lock()
	}
	var ran []string
	if err == nil {
		ran, err = do(ctx, s)
	}
	if lock != nil {
		if released := lock.Release(); err == nil {
			err = released
		}
	}
	result := phases.Result{OK: err == nil, DryRun: r.dryRun, Phases: nonNil(ran), Healthy: []string{}}
	if s != nil {
		result.Changes = s.Files.Changes()
		result.Healthy = nonNil(s.Healthy)
		result.JoinCommand = s.JoinCommand
		result.Snapshot = s.Snapshot
	}
	result.Written, result.Unchanged = nonNil(result.Written), nonNil(result.Unchanged)
	return outcome{err: err, result: result}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
