// Package phases owns kubeboot's workflows as ordered phase lists: the
// runner that executes them, the State a run's phases share, and the phases
// themselves, each of which converges. Init is the `kubeboot init` list;
// join builds the join list from the same phases, and day2 reuses their
// helpers. Phases reach disk only through a files.Writer and the terminal
// only through an output.Reporter.
package phases

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/discovery"
	"github.com/kubeboot/kubeboot/etcd"
	"github.com/kubeboot/kubeboot/exit"
	"github.com/kubeboot/kubeboot/files"
	"github.com/kubeboot/kubeboot/output"
)

// Phase is one step of a workflow. Phases hand data to each other through
// disk, so each can run alone on a node where the earlier ones have run.
type Phase struct {
	// Name is the phase's command name, like "certs".
	Name string
	// Short is a one-line description.
	Short string
	// LiveOnly marks phases that need a running node, such as waiting for
	// health; dry runs and offline renders skip them.
	LiveOnly bool
	// Run does the work and converges: it reuses what is correct, creates
	// what is missing, and fails on what is wrong. A phase with Subphases
	// has none: running it runs them.
	Run func(ctx context.Context, s *State) error
	// Subphases, when set, are the parts of the phase, in order, each
	// named "<phase>/<part>", as kubeadm's addon/coredns: --skip-phases
	// skips the whole phase or one part, and `phase <phase> <part>` runs
	// one part alone.
	Subphases []Phase
}

// steps are the phase itself, or its subphases when it has them.
func (p Phase) steps() []Phase {
	if len(p.Subphases) > 0 {
		return p.Subphases
	}
	return []Phase{p}
}

// Options are the run-wide settings phases read.
type Options struct {
	// DryRun writes nothing; the runner skips LiveOnly phases.
	DryRun bool
	// Offline renders for another machine (--root): checks of this host's
	// ports, users and data are skipped.
	Offline bool
	// Strict turns preflight warnings into errors.
	Strict bool
	// Renew re-issues certificates and kubeconfigs that exist but are wrong
	// in a way a renewal fixes, such as a missing SAN or near expiry.
	Renew bool
	// Diff prints a unified diff of each rendered manifest against the one
	// in the manifest directory.
	Diff bool
	// IgnorePreflightErrors are check names (lower-case) whose failure is
	// only a warning; "all" ignores every check.
	IgnorePreflightErrors []string
}

// State is what the phases of one run share.
type State struct {
	// Config is the defaulted, validated configuration.
	Config *config.ClusterConfiguration
	// Files performs every disk write.
	Files files.Writer
	// Report prints progress.
	Report *output.Reporter
	// Stdout receives the product, such as diffs.
	Stdout io.Writer
	// Options are the run-wide settings.
	Options Options
	// Join is the join part of a JoinConfiguration, for the join
	// workflow; nil otherwise.
	Join *config.Join
	// Secrets are the files of the certificate bundle a join imports; nil
	// when the node holds them already.
	Secrets map[string][]byte
	// Worker is the configuration of a worker's join; nil otherwise.
	// Config then holds only its node's settings (see
	// config.WorkerConfiguration.NodeConfig).
	Worker *config.WorkerConfiguration
	// Discovered is the cluster a worker's join discovered; nil until
	// its first phase that needs it discovers it.
	Discovered *discovery.Cluster
	// Healthy collects the components the wait phase saw healthy.
	Healthy []string
	// API is the client of the live phases that talk to the API server;
	// nil until the first of them builds it: from super-admin.conf, or in
	// a worker's join with the bootstrap token.
	API kubernetes.Interface
	// JoinCommand is the command that joins a node to this cluster, with
	// the bootstrap token in it: the bootstrap-token phase sets it for the
	// run's result, and nothing may print it elsewhere.
	JoinCommand string
	// Snapshot is the etcd snapshot the run saved and verified, for the
	// run's result; nil when it saved none.
	Snapshot *etcd.SnapshotInfo
}

// Runner executes an ordered list of phases; the order is the dependency order.
type Runner struct {
	// Phases are run in this order.
	Phases []Phase
}

// Names returns the phase names in order, each subphase's after its
// phase's.
func (r Runner) Names() []string {
	var names []string
	for _, p := range r.Phases {
		names = append(names, p.Name)
		for _, sub := range p.Subphases {
			names = append(names, sub.Name)
		}
	}
	return names
}

// Run executes every phase except those named in skip, and returns the names
// of the phases that ran; LiveOnly phases a dry run or an offline render
// passes over are not among them.
func (r Runner) Run(ctx context.Context, s *State, skip []string) ([]string, error) {
	if err := r.CheckSkip(skip); err != nil {
		return nil, err
	}
	var ran []string
	for _, p := range r.Phases {
		if slices.Contains(skip, p.Name) {
			continue
		}
		for _, step := range p.steps() {
			if step.Name != p.Name && slices.Contains(skip, step.Name) {
				continue
			}
			done, err := r.runPhase(ctx, s, step)
			if err != nil {
				return ran, err
			}
			if done {
				ran = append(ran, step.Name)
			}
		}
	}
	return ran, nil
}

// CheckSkip refuses a name of --skip-phases that is no phase of r; the
// commands check before they take the node lock.
func (r Runner) CheckSkip(skip []string) error {
	for _, name := range skip {
		if !slices.Contains(r.Names(), name) {
			return &exit.UsageError{Msg: fmt.Sprintf("unknown phase %q in --skip-phases: the phases are %s", name, strings.Join(r.Names(), ", "))}
		}
	}
	return nil
}

// RunOne executes the single phase or subphase called name, and returns
// the names of the steps that ran: the phase's, or its subphases'.
func (r Runner) RunOne(ctx context.Context, s *State, name string) ([]string, error) {
	for _, p := range r.Phases {
		if p.Name == name {
			return Runner{Phases: []Phase{p}}.Run(ctx, s, nil)
		}
		for _, sub := range p.Subphases {
			if sub.Name == name {
				return Runner{Phases: []Phase{sub}}.Run(ctx, s, nil)
			}
		}
	}
	return nil, &exit.UsageError{Msg: fmt.Sprintf("unknown phase %q: the phases are %s", name, strings.Join(r.Names(), ", "))}
}

// Operation is a command that is not a phase list, such as reset or
// upgrade apply: one named step that reports as a phase does.
type Operation struct {
	// Name is the step's name in progress lines and the result, like "reset".
	Name string
	// Run does the work.
	Run func(ctx context.Context, s *State) error
}

// Execute runs the operation as a one-phase workflow and returns the
// names of the steps that ran: its own, unless it failed.
func (o Operation) Execute(ctx context.Context, s *State) ([]string, error) {
	ran, err := Runner{Phases: []Phase{{Name: o.Name, Run: o.Run}}}.Run(ctx, s, nil)
	if err != nil {
		return nil, errors.Unwrap(err)
	}
	return ran, nil
}

// runPhase runs p, unless it needs a live node this run does not have.
func (r Runner) runPhase(ctx context.Context, s *State, p Phase) (bool, error) {
	// A run nested in an operation (upgrade's prep phases) gives the
	// operation its name back afterwards.
	defer s.Report.SetPhase(s.Report.Phase())
	s.Report.SetPhase(p.Name)
	switch {
	case p.LiveOnly && s.Options.DryRun:
		s.Report.Infof("skipped in a dry run")
		return false, nil
	case p.LiveOnly && s.Options.Offline:
		s.Report.Infof("skipped: --root renders for another machine")
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("phase %s: %w", p.Name, err)
	}
	if err := p.Run(ctx, s); err != nil {
		return false, fmt.Errorf("phase %s: %w", p.Name, err)
	}
	return true, nil
}

// Result is the final object of a run, printed last with -o json.
type Result struct {
	// OK says whether the run succeeded.
	OK bool `json:"ok"`
	// Error is the failure, when OK is false.
	Error string `json:"error,omitempty"`
	// ExitCode is the process exit code.
	ExitCode int `json:"exitCode"`
	// DryRun says that nothing was written.
	DryRun bool `json:"dryRun,omitempty"`
	// Phases are the phases that ran, in order.
	Phases []string `json:"phases"`
	files.Changes
	// Healthy are the components seen healthy.
	Healthy []string `json:"healthy"`
	// JoinCommand joins a node to the cluster; it holds a bootstrap token.
	JoinCommand string `json:"joinCommand,omitempty"`
	// Snapshot is the etcd snapshot the run saved (`etcd snapshot save`):
	// its path, size, revision, keys and time.
	Snapshot *etcd.SnapshotInfo `json:"snapshot,omitempty"`
}
