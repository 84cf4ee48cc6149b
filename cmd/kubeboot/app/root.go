// Package app holds kubeboot's commands, one file per command. Commands parse
// flags into an options struct and hand the work to the workflows (phases,
// join) and operations (day2).
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/exit"
)

// exitError is a failure whose details were already printed; it carries
// only a summary and the exit code.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// ExitCode returns the code the process exits with.
func (e *exitError) ExitCode() int { return e.code }

// Main runs kubeboot with the process arguments and returns its exit code.
// It is the only place that prints an error, builds the commands'
// dependencies, and handles SIGINT and SIGTERM: the first ends the
// context of every command (cmd.Context()), which stops on its own; from
// then on, the signals' default action is back, so that a second one ends
// the process at once.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()
	d := newDeps(os.Getenv(cpuProfileEnv))
	if d.cpuProfile != "" {
		// Not for the daemons this run starts, which would write over it.
		_ = os.Unsetenv(cpuProfileEnv)
		f, err := os.Create(d.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			_, _ = fmt.Fprintf(os.Stderr, "error: %s: %v\n", cpuProfileEnv, err)
			return 1
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	return runArgs(ctx, d, os.Args[1:], os.Stdout, os.Stderr)
}

// cpuProfileEnv names a file for a CPU profile of the whole run (make
// bench keeps the bring-up's and the join's); `lab up --cluster` gives
// each node's lab up its own, <name>-<node>.pprof.
const cpuProfileEnv = "KUBEBOOT_CPU_PROFILE"

func runArgs(ctx context.Context, d deps, args []string, stdout, stderr io.Writer) int {
	root := newRootCommand(d, stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var passed *exit.CommandExit
	if !errors.As(err, &passed) {
		// Whatever an error quotes, a token given in the wrong place among
		// it, its secret is not shown.
		_, _ = fmt.Fprintf(stderr, "error: %s\n", bootstraptoken.Redact(err.Error()))
	}
	return exit.Code(err)
}

// newRootCommand builds the kubeboot command tree on d.
func newRootCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	root := groupCommand("kubeboot", "Bootstrap a Kubernetes control plane on this node")
	root.Example = examples(
		"kubeboot init --config cluster.yaml",
		"kubeboot join 10.0.0.10:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash sha256:1c3a0c4b7e2e5f8a9d6b3c0e1f2a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a",
		"kubeboot lab up --cluster examples/machines.yaml",
	)
	root.Long = "kubeboot generates the PKI and kubeconfigs, renders the control-plane static pod manifests,\n" +
		"proves the kubelet will accept them, writes them atomically and waits until every component is healthy."
	root.SilenceErrors, root.SilenceUsage = true, true
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(flagError)
	root.AddCommand(newInitCommand(d, stdout, stderr), newJoinCommand(d, stdout, stderr), newBootstrapCommand(d, stdout, stderr), newCertsCommand(d, stdout, stderr),
		newDiffCommand(d, stdout, stderr), newResetCommand(d, stdout, stderr), newUpgradeCommand(d, stdout, stderr),
		newLabCommand(stdout, stderr), newTokenCommand(d, stdout, stderr), newValidateCommand(stdout), newConfigCommand(d, stdout, stderr), newImagesCommand(d, stdout, stderr), newCSRApproverCommand(stderr), newNetworkPolicyCommand(stderr), newVersionCommand(d, stdout))
	root.AddCommand(newEtcdCommand(d, stdout, stderr))
	// Cobra's completion commands quote an argument they refuse: they
	// refuse it as the others do.
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			for _, shell := range c.Commands() {
				shell.Args = usageArgs(cobra.NoArgs)
			}
		}
	}
	return root
}

// groupCommand is a command that only holds subcommands. Run bare, it shows
// its help; with an unknown subcommand it fails with the usage exit code,
// so a typo in a provisioning script cannot pass for success.
func groupCommand(use, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			return argsError(cmd, "a subcommand: "+subcommands(cmd), len(args))
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
}

// examples is a command's Example text: one invocation a line, indented
// as cobra's help indents its other sections.
func examples(lines ...string) string {
	return "  " + strings.Join(lines, "\n  ")
}

// The arguments and flags a command refuses are never quoted in its error,
// but for the names of flags: any of them may be a secret, such as a token
// given where a command takes none (kubeadm's `token create <token>`) or a
// flag's value pasted in the wrong place.

// usageArgs wraps a cobra positional-argument rule so that its failure
// exits with the usage code and says what the command takes: no
// arguments (or a subcommand), or what its usage line shows.
func usageArgs(rule cobra.PositionalArgs) cobra.PositionalArgs {
	return argsTaking(rule, "")
}

// argsTaking is usageArgs whose error says the command takes want, unless
// want is empty.
func argsTaking(rule cobra.PositionalArgs, want string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if rule(cmd, args) == nil {
			return nil
		}
		if want != "" {
			return argsError(cmd, want, len(args))
		}
		// A rule that takes no argument but refuses one takes none.
		if rule(cmd, nil) == nil && rule(cmd, []string{""}) != nil {
			if subs := subcommands(cmd); subs != "" {
				return argsError(cmd, "no arguments, or a subcommand: "+subs, len(args))
			}
			return argsError(cmd, "no arguments", len(args))
		}
		return argsError(cmd, "what its usage line shows ("+cmd.UseLine()+")", len(args))
	}
}

// argsError is the error for n arguments cmd refuses: it says what cmd
// takes, want, and how many arguments it got, none of them.
func argsError(cmd *cobra.Command, want string, n int) error {
	got := "none"
	switch {
	case n == 1:
		got = "1 argument (not shown, since it may be a secret)"
	case n > 1:
		got = fmt.Sprintf("%d arguments (not shown, since one may be a secret)", n)
	}
	return &exit.UsageError{Msg: fmt.Sprintf("%s takes %s; got %s: see %s --help", cmd.CommandPath(), want, got, cmd.CommandPath())}
}

// subcommands lists the names of cmd's subcommands: "a, b or c".
func subcommands(cmd *cobra.Command) string {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// flagName is the shape of kubeboot's flag names: lowercase words, each
// perhaps ending in a digit (s3), joined by dashes. An unknown flag is
// named in its error only if it has this shape, which no token (it has a
// dot) nor an S3 key (it has capitals) has.
var flagName = regexp.MustCompile(`^[a-z]+[0-9]?(-[a-z]+[0-9]?)*$`)

// flagError is every command's error for flags that do not parse. It names
// the flag but never quotes what was given: a refused value, a group of
// shorthand flags (-abc) or a word that is no flag is not shown.
func flagError(cmd *cobra.Command, err error) error {
	help := cmd.CommandPath() + " --help"
	var msg string
	if invalid, ok := errors.AsType[*pflag.InvalidValueError](err); ok {
		flag := invalid.GetFlag()
		msg = fmt.Sprintf("--%s: the value given is no valid %s (not shown, since it may be a secret): see %s", flag.Name, flag.Value.Type(), help)
	} else if unknown, ok := errors.AsType[*pflag.NotExistError](err); ok {
		switch name := unknown.GetSpecifiedName(); {
		case unknown.GetSpecifiedShortnames() != "":
			msg = fmt.Sprintf("unknown shorthand flag %q (the group it is in is not shown, since it may be a secret): see %s", name, help)
		case flagName.MatchString(name):
			msg = fmt.Sprintf("unknown flag: --%s: see %s", name, help)
		default:
			msg = fmt.Sprintf("unknown flag (not shown, since it may be a secret): see %s", help)
		}
	} else if missing, ok := errors.AsType[*pflag.ValueRequiredError](err); ok && missing.GetSpecifiedShortnames() != "" {
		msg = fmt.Sprintf("flag -%s needs an argument (the group it is in is not shown, since it may be a secret): see %s", missing.GetSpecifiedName(), help)
	} else if _, ok := errors.AsType[*pflag.InvalidSyntaxError](err); ok {
		msg = fmt.Sprintf("bad flag syntax (not shown, since it may be a secret): a flag is -x or --name: see %s", help)
	} else {
		msg = err.Error()
	}
	return &exit.UsageError{Msg: msg}
}

// RootCommand is kubeboot's whole command tree, for what describes it
// rather than runs it: the release's shell completions and man pages.
func RootCommand() *cobra.Command {
	return newRootCommand(newDeps(""), io.Discard, io.Discard)
}
