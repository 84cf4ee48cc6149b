package app

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kubeboot/kubeboot/internal/exit"
)

// TestRefusedArgumentsAreNeverQuoted: every command refuses arguments it
// does not take, and values its flags do not, with the usage exit code and
// an error that does not quote them, since one may be a secret.
func TestRefusedArgumentsAreNeverQuoted(t *testing.T) {
	const token, secret = "abcdef.0123456789abcdef", "0123456789abcdef"
	check := func(c *cobra.Command, args []string, err error) {
		t.Helper()
		if err == nil {
			return
		}
		if strings.Contains(err.Error(), secret) || exit.Code(err) != exit.Usage {
			t.Errorf("%s %s: exit %d, %v; want exit %d and an error without the token", c.CommandPath(), strings.Join(args, " "), exit.Code(err), err, exit.Usage)
		}
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		// Cobra checks the arguments of a runnable command only.
		if c.Runnable() {
			for n := 1; n <= 3; n++ {
				args := slices.Repeat([]string{token}, n)
				check(c, args, c.ValidateArgs(args))
			}
		}
		flagArgs := [][]string{{"--" + token}, {"---" + token}, {"-" + token}, {"-=" + token}}
		c.Flags().VisitAll(func(f *pflag.Flag) {
			flagArgs = append(flagArgs, []string{"--" + f.Name + "=" + token})
		})
		for _, args := range flagArgs {
			if err := c.ParseFlags(args); err != nil {
				check(c, args, c.FlagErrorFunc()(c, err))
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCommand(newDeps(""), io.Discard, io.Discard))
}

// TestArgumentErrors: an error for arguments says what the command takes,
// how many it got and where its help is.
func TestArgumentErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nope"}, "kubeboot takes a subcommand: bootstrap, certs, completion, config, csr-approver, diff, etcd, images, init, join, lab, network-policy, reset, token, upgrade, validate or version; got 1 argument (not shown, since it may be a secret): see kubeboot --help"},
		{[]string{"init", "a", "b"}, "kubeboot init takes no arguments, or a subcommand: phase; got 2 arguments (not shown, since one may be a secret): see kubeboot init --help"},
		{[]string{"version", "a"}, "kubeboot version takes no arguments; got 1 argument"},
		{[]string{"config", "validate"}, "kubeboot config validate takes what its usage line shows (kubeboot config validate FILE [flags]); got none: see kubeboot config validate --help"},
		{[]string{"completion", "bash", "a"}, "kubeboot completion bash takes no arguments; got 1 argument"},
		{[]string{"init", "--bogus"}, "unknown flag: --bogus: see kubeboot init --help"},
		{[]string{"init", "--Bogus"}, "unknown flag (not shown, since it may be a secret): see kubeboot init --help"},
		{[]string{"init", "--dry-run=maybe"}, "--dry-run: the value given is no valid bool (not shown, since it may be a secret): see kubeboot init --help"},
		{[]string{"init", "---x"}, "bad flag syntax (not shown, since it may be a secret): a flag is -x or --name: see kubeboot init --help"},
		{[]string{"version", "-xo"}, `unknown shorthand flag "x" (the group it is in is not shown, since it may be a secret)`},
		{[]string{"version", "-o"}, "flag -o needs an argument (the group it is in is not shown, since it may be a secret)"},
	} {
		code, _, stderr := runCLI(t, tc.args...)
		if code != exit.Usage || !strings.Contains(stderr, tc.want) {
			t.Errorf("kubeboot %s: exit %d, %q; want exit %d and %q", strings.Join(tc.args, " "), code, stderr, exit.Usage, tc.want)
		}
	}
}
