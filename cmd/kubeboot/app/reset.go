package app

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/kubeboot/kubeboot/day2"
)

// resetOptions are the flags of `kubeboot reset`.
type resetOptions struct {
	deps       deps
	configPath string
	root       string
	output     outputFormat
	dryRun     bool
	force      bool
	keepPKI    bool
}

// spec loads the node's configuration, whichever kind: a joined node resets too.
func (o *resetOptions) spec() (runSpec, error) {
	r, err := o.deps.nodeSpec(o.configPath, o.root)
	r.dryRun, r.options.DryRun = o.dryRun, o.dryRun
	return r, err
}

// newResetCommand is `kubeboot reset`: it undoes init's files on this node.
// Processes are the kubelet's business (and, in the lab, `lab down`'s).
func newResetCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	opts := &resetOptions{deps: d}
	cmd := &cobra.Command{
		Use:   "reset",
		Short: "Remove the manifests, wait for the components to stop, then remove the kubeconfigs, PKI, etcd data and kubeboot's own files",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			reset := day2.ResetOptions{Force: opts.force, KeepPKI: opts.keepPKI}
			// Only a human at a terminal is asked; a script gets a refusal.
			if f, ok := cmd.InOrStdin().(*os.File); ok && term.IsTerminal(int(f.Fd())) {
				reset.Confirm = func(q string) bool { return confirm(f, stderr, q) }
			}
			return d.execute(cmd.Context(), opts.output, stdout, stderr, opts.spec, onNode(day2.Reset(reset).Execute))
		},
	}
	flags := cmd.Flags()
	addConfigFlag(flags, &opts.configPath)
	addDryRunFlag(flags, &opts.dryRun)
	addRootFlag(flags, &opts.root)
	addOutputFlag(flags, &opts.output)
	flags.BoolVar(&opts.force, "force", false, "remove the etcd data dir without asking, and leave the etcd cluster even when the remaining members would lose their quorum")
	flags.BoolVar(&opts.keepPKI, "keep-pki", false, "keep the certificates, keys and encryption configuration")
	return cmd
}

// confirm asks a yes/no question on the terminal; anything but yes is no.
func confirm(in io.Reader, out io.Writer, question string) bool {
	_, _ = fmt.Fprintf(out, "%s [y/N] ", question)
	answer, _ := bufio.NewReader(in).ReadString('\n')
	answer = strings.ToLower(strings.TrimSpace(answer))
	return answer == "y" || answer == "yes"
}
