// Package app holds kubeboot's commands, one file per command. Commands parse
// flags into an options struct and hand the work to the phases package.
package app

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/phases"
)

// Exit codes shared by every command.
const (
	exitFailure  = 1
	exitRejected = 3
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
// It is the only place that prints an error.
func Main() int {
	return run(os.Args[1:], os.Stdout, os.Stderr)
}

func run(args []string, stdout, stderr io.Writer) int {
	root := NewRootCommand(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	_, _ = fmt.Fprintf(stderr, "error: %v\n", err)
	return ExitCode(err)
}

// ExitCode maps an error to kubeboot's exit codes: errors that know their
// code carry it (2 usage or config, 3 manifest rejected, 4 not healthy in
// time); anything else is 1.
func ExitCode(err error) int {
	var coded interface{ ExitCode() int }
	if errors.As(err, &coded) {
		return coded.ExitCode()
	}
	return exitFailure
}

// NewRootCommand builds the kubeboot command tree.
func NewRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := groupCommand("kubeboot", "Bootstrap a Kubernetes control plane on this node")
	root.Long = "kubeboot generates the PKI and kubeconfigs, renders the control-plane static pod manifests,\n" +
		"proves the kubelet will accept them, writes them atomically and waits until every component is healthy."
	root.SilenceErrors, root.SilenceUsage = true, true
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &phases.UsageError{Msg: err.Error()}
	})
	root.AddCommand(newInitCommand(stdout, stderr), newJoinCommand(stdout, stderr), newCertsCommand(stdout, stderr),
		newDiffCommand(stdout, stderr), newResetCommand(stdout, stderr), newUpgradeCommand(stdout, stderr),
		newLabCommand(stdout, stderr), newValidateCommand(stdout), newConfigCommand(stdout), newVersionCommand(stdout))
	return root
}

// outputFormat is the value of -o: text or json.
type outputFormat string

func (o *outputFormat) String() string { return string(*o) }

func (o *outputFormat) Set(s string) error {
	if s != "text" && s != "json" {
		return fmt.Errorf("want text or json, got %q", s)
	}
	*o = outputFormat(s)
	return nil
}

func (o *outputFormat) Type() string { return "text|json" }

func addOutputFlag(cmd *cobra.Command, o *outputFormat) {
	*o = "text"
	cmd.Flags().VarP(o, "output", "o", "output format: text or json (one JSON object per line)")
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

// usageArgs wraps a cobra positional-argument rule so that its failure
// exits with the usage code.
func usageArgs(rule cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := rule(cmd, args); err != nil {
			return &phases.UsageError{Msg: err.Error()}
		}
		return nil
	}
}
