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
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/exit"
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
		_, _ = fmt.Fprintf(stderr, "error: %v\n", err)
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
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exit.UsageError{Msg: err.Error()}
	})
	root.AddCommand(newInitCommand(d, stdout, stderr), newJoinCommand(d, stdout, stderr), newBootstrapCommand(d, stdout, stderr), newCertsCommand(d, stdout, stderr),
		newDiffCommand(d, stdout, stderr), newResetCommand(d, stdout, stderr), newUpgradeCommand(d, stdout, stderr),
		newLabCommand(stdout, stderr), newTokenCommand(d, stdout, stderr), newValidateCommand(stdout), newConfigCommand(d, stdout), newImagesCommand(d, stdout, stderr), newCSRApproverCommand(stderr), newVersionCommand(d, stdout))
	root.AddCommand(newEtcdCommand(d, stdout, stderr))
	return root
}

// groupCommand is a command that only holds subcommands. Run bare, it shows
// its help; with an unknown subcommand it fails with the usage exit code,
// so a typo in a provisioning script cannot pass for success.
func groupCommand(use, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  usageArgs(cobra.NoArgs),
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
}

// examples is a command's Example text: one invocation a line, indented
// as cobra's help indents its other sections.
func examples(lines ...string) string {
	return "  " + strings.Join(lines, "\n  ")
}

// usageArgs wraps a cobra positional-argument rule so that its failure
// exits with the usage code.
func usageArgs(rule cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := rule(cmd, args); err != nil {
			return &exit.UsageError{Msg: err.Error()}
		}
		return nil
	}
}
