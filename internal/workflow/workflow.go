// Package workflow is kubeboot's workflow engine: a workflow is an
// ordered list of phases over its own data (Phase, Runner), or one named
// step (Operation), run with the core every step of a run shares (Run:
// the disk, the terminal, the run-wide options, the node's processes and
// the API client) and ending in a Result. It knows no workflow: init's
// phases are in package phases, the joins', the control plane's and the
// worker's operations in their own packages.
package workflow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/procnet"
	"github.com/kubeboot/kubeboot/templates"
)

// Phase is one step of a workflow whose data is D. Phases hand data to
// each other through disk, so each can run alone on a node where the
// earlier ones have run; D says, to the compiler, what else a phase may
// use.
type Phase[D Data] struct {
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
	Run func(ctx context.Context, d D) error
	// Subphases, when set, are the parts of the phase, in order, each
	// named "<phase>/<part>", as kubeadm's addon/coredns: --skip-phases
	// skips the whole phase or one part, and `phase <phase> <part>` runs
	// one part alone.
	Subphases []Phase[D]
}

// steps are the phase itself, or its subphases when it has them.
func (p Phase[D]) steps() []Phase[D] {
	if len(p.Subphases) > 0 {
		return p.Subphases
	}
	return []Phase[D]{p}
}

// Within makes p, a phase of the workflows whose data is P, a phase of a
// workflow whose data D holds a P (part returns it): the control-plane
// join runs init's phases on the Node inside its own data.
func Within[D, P Data](p Phase[P], part func(D) P) Phase[D] {
	out := Phase[D]{Name: p.Name, Short: p.Short, LiveOnly: p.LiveOnly}
	if p.Run != nil {
		run := p.Run
		out.Run = func(ctx context.Context, d D) error { return run(ctx, part(d)) }
	}
	for _, sub := range p.Subphases {
		out.Subphases = append(out.Subphases, Within(sub, part))
	}
	return out
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
	// UploadCerts makes init's upload-certs phase store the cluster
	// secrets even without certificateKey, with a new key.
	UploadCerts bool
	// ConfigFile is the absolute path of the node's configuration file,
	// as the run was given it; empty when it runs on the defaults. The
	// scheduled renewal's unit names it.
	ConfigFile string
}

// Run is the core every step of one run shares, whatever its workflow:
// the disk, the terminal, the run-wide options, the node's processes and
// the API client. A workflow's data embeds it.
type Run struct {
	// Files performs every disk write.
	Files files.Writer
	// Report prints progress.
	Report *output.Reporter
	// Stdout receives the product, such as diffs.
	Stdout io.Writer
	// Options are the run-wide settings.
	Options Options
	// System runs systemctl and finds the kubelet, for kubelet-start.
	System System
	// API is the client of the live phases that talk to the API server;
	// nil until the first of them builds it: from super-admin.conf, or in
	// a worker's join with the bootstrap token.
	API kubernetes.Interface
}

// Base returns r: the runner reads a workflow's core through it.
func (r *Run) Base() *Run { return r }

// Data is a workflow's data: its Run (embedded, which gives Base), and
// what its phases need beyond it.
type Data interface {
	Base() *Run
}

// Runner executes an ordered list of phases; the order is the dependency order.
type Runner[D Data] struct {
	// Phases are run in this order.
	Phases []Phase[D]
}

// Names returns the phase names in order, each subphase's after its
// phase's.
func (r Runner[D]) Names() []string {
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
func (r Runner[D]) Run(ctx context.Context, d D, skip []string) ([]string, error) {
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
			done, err := runPhase(ctx, d, step)
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
func (r Runner[D]) CheckSkip(skip []string) error {
	for _, name := range skip {
		if !slices.Contains(r.Names(), name) {
			return &exit.UsageError{Msg: fmt.Sprintf("unknown phase %q in --skip-phases: the phases are %s", name, strings.Join(r.Names(), ", "))}
		}
	}
	return nil
}

// RunOne executes the single phase or subphase called name, and returns
// the names of the steps that ran: the phase's, or its subphases'.
func (r Runner[D]) RunOne(ctx context.Context, d D, name string) ([]string, error) {
	for _, p := range r.Phases {
		if p.Name == name {
			return Runner[D]{Phases: []Phase[D]{p}}.Run(ctx, d, nil)
		}
		for _, sub := range p.Subphases {
			if sub.Name == name {
				return Runner[D]{Phases: []Phase[D]{sub}}.Run(ctx, d, nil)
			}
		}
	}
	return nil, &exit.UsageError{Msg: fmt.Sprintf("unknown phase %q: the phases are %s", name, strings.Join(r.Names(), ", "))}
}

// Operation is a command that is not a phase list, such as reset or
// upgrade apply: one named step that reports as a phase does.
type Operation[D Data] struct {
	// Name is the step's name in progress lines and the result, like "reset".
	Name string
	// Run does the work.
	Run func(ctx context.Context, d D) error
}

// Execute runs the operation as a one-phase workflow and returns the
// names of the steps that ran: its own, unless it failed.
func (o Operation[D]) Execute(ctx context.Context, d D) ([]string, error) {
	ran, err := Runner[D]{Phases: []Phase[D]{{Name: o.Name, Run: o.Run}}}.Run(ctx, d, nil)
	if err != nil {
		return nil, errors.Unwrap(err)
	}
	return ran, nil
}

// runPhase runs p, unless it needs a live node this run does not have.
func runPhase[D Data](ctx context.Context, d D, p Phase[D]) (bool, error) {
	r := d.Base()
	// A run nested in an operation (upgrade's prep phases) gives the
	// operation its name back afterwards.
	defer r.Report.SetPhase(r.Report.Phase())
	r.Report.SetPhase(p.Name)
	switch {
	case p.LiveOnly && r.Options.DryRun:
		r.Report.Infof("skipped in a dry run")
		return false, nil
	case p.LiveOnly && r.Options.Offline:
		r.Report.Infof("skipped: --root renders for another machine")
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("phase %s: %w", p.Name, err)
	}
	if err := p.Run(ctx, d); err != nil {
		return false, fmt.Errorf("phase %s: %w", p.Name, err)
	}
	return true, nil
}

// Result is what every run ends with, printed last with -o json; a
// workflow with more to say has a result type of its own that embeds it
// (phases.InitResult, snapshot.SaveResult).
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
}

// System is how kubelet-start and the upgrades reach the node's
// processes: systemctl, the search of the PATH for the kubelet, and the
// kubelet binary's release; and the kubeboot binary that kubeboot's own
// static pods run. Real runs use HostSystem; tests a fake
// (phasestest.FakeSystemd).
type System struct {
	// Systemctl runs systemctl with args and returns its combined output.
	Systemctl func(ctx context.Context, args ...string) ([]byte, error)
	// LookPath finds an executable in the PATH.
	LookPath func(file string) (string, error)
	// Version runs the binary at path with --version and returns what it
	// prints, such as "Kubernetes v1.36.3".
	Version func(ctx context.Context, path string) (string, error)
	// RunningSince says when a process that runs the executable file at
	// path started, if one does (see procnet.Executing). Nil: never.
	RunningSince func(path string) (time.Time, bool)
	// Kubeboot is the kubeboot binary that the CSR approver's and the
	// scheduled snapshots' static pods run.
	Kubeboot templates.Kubeboot
	// DeleteLink deletes the node's network interface name, saying
	// whether there was one: reset removes the pod network's with it.
	DeleteLink func(name string) (bool, error)
}

// HostSystem is this machine's systemctl and PATH, and the running
// kubeboot, of release version, as the binary kubeboot's own pods run:
// the file it was started from, links resolved (the package's
// /usr/bin/kubeboot), or /usr/bin/kubeboot if that cannot be told.
func HostSystem(version string) System {
	binary := "/usr/bin/kubeboot"
	if exe, err := os.Executable(); err == nil {
		if resolved, err := filepath.EvalSymlinks(exe); err == nil {
			binary = resolved
		}
	}
	return System{
		Kubeboot: templates.Kubeboot{Binary: binary, Version: version},
		Systemctl: func(ctx context.Context, args ...string) ([]byte, error) {
			return exec.CommandContext(ctx, "systemctl", args...).CombinedOutput()
		},
		LookPath:     exec.LookPath,
		Version:      (&versions{}).of,
		RunningSince: runningSince,
		DeleteLink:   deleteLink,
	}
}

// runningSince is when a process of this host that runs the file at path
// started, if one does.
func runningSince(path string) (time.Time, bool) {
	p, ok := procnet.Executing(path)
	if !ok {
		return time.Time{}, false
	}
	started, err := p.Start.WallTime()
	return started, err == nil
}

// versions remembers what each binary printed for --version during a
// run. Starting the kubelet only to ask its release costs more than the
// rest of an upgrade with nothing to change, and upgrade apply asks twice:
// in its preflight and before it decides whether to restart the kubelet.
// An answer is kept for the file it came from: a package that installs a
// new binary writes a new file (a running binary cannot be written in
// place), whose inode, size or modification time differs, and that file
// is asked again.
type versions struct {
	mu    sync.Mutex
	known map[string]binaryVersion
}

// binaryVersion is one binary's answer, with the file it came from.
type binaryVersion struct {
	file os.FileInfo
	out  string
}

// of runs the binary at path with --version, unless the same file
// already answered.
func (v *versions) of(ctx context.Context, path string) (string, error) {
	file, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if known, ok := v.known[path]; ok && os.SameFile(known.file, file) && known.file.Size() == file.Size() && known.file.ModTime().Equal(file.ModTime()) {
		return known.out, nil
	}
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return string(out), err
	}
	if v.known == nil {
		v.known = map[string]binaryVersion{}
	}
	v.known[path] = binaryVersion{file: file, out: string(out)}
	return string(out), nil
}

// deleteLink deletes the network interface name of this process's
// network namespace, if there is one.
func deleteLink(name string) (bool, error) {
	link, err := netlink.LinkByName(name)
	if _, missing := errors.AsType[netlink.LinkNotFoundError](err); missing {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("find the network interface %s: %w", name, err)
	}
	if err := netlink.LinkDel(link); err != nil {
		return false, fmt.Errorf("delete the network interface %s: %w", name, err)
	}
	return true, nil
}
