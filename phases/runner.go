// Package phases owns the init workflow: the ordered list of phases, the
// runner that executes them, their shared State, and the FileWriter through
// which every disk write goes. It is the only package that touches disk.
package phases

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/kubeboot/kubeboot/config"
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
	// what is missing, and fails on what is wrong.
	Run func(ctx context.Context, s *State) error
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
	Files FileWriter
	// Report prints progress.
	Report *Reporter
	// Stdout receives the product, such as diffs.
	Stdout io.Writer
	// Options are the run-wide settings.
	Options Options
	// Healthy collects the components the wait phase saw healthy.
	Healthy []string
}

// Runner executes an ordered list of phases; the order is the dependency order.
type Runner struct {
	// Phases are run in this order.
	Phases []Phase
}

// Names returns the phase names in order.
func (r Runner) Names() []string {
	names := make([]string, len(r.Phases))
	for i, p := range r.Phases {
		names[i] = p.Name
	}
	return names
}

// Run executes every phase except those named in skip, and returns the names
// of the phases that ran; LiveOnly phases a dry run or an offline render
// passes over are not among them.
func (r Runner) Run(ctx context.Context, s *State, skip []string) ([]string, error) {
	for _, name := range skip {
		if !slices.Contains(r.Names(), name) {
			return nil, &UsageError{Msg: fmt.Sprintf("unknown phase %q in --skip-phases: the phases are %s", name, strings.Join(r.Names(), ", "))}
		}
	}
	var ran []string
	for _, p := range r.Phases {
		if slices.Contains(skip, p.Name) {
			continue
		}
		done, err := r.runPhase(ctx, s, p)
		if err != nil {
			return ran, err
		}
		if done {
			ran = append(ran, p.Name)
		}
	}
	return ran, nil
}

// RunOne executes the single phase called name, and says whether it ran.
func (r Runner) RunOne(ctx context.Context, s *State, name string) (bool, error) {
	for _, p := range r.Phases {
		if p.Name == name {
			return r.runPhase(ctx, s, p)
		}
	}
	return false, &UsageError{Msg: fmt.Sprintf("unknown phase %q: the phases are %s", name, strings.Join(r.Names(), ", "))}
}

// runPhase runs p, unless it needs a live node this run does not have.
func (r Runner) runPhase(ctx context.Context, s *State, p Phase) (bool, error) {
	s.Report.SetPhase(p.Name)
	defer s.Report.SetPhase("")
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

// UsageError is a mistake on the command line; it exits with code 2.
type UsageError struct {
	// Msg says what is wrong and how to fix it.
	Msg string
}

// Error returns the message.
func (e *UsageError) Error() string { return e.Msg }

// ExitCode makes usage errors exit with code 2.
func (e *UsageError) ExitCode() int { return 2 }
