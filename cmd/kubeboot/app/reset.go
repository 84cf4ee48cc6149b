package app

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/kubeboot/kubeboot/phases"
)

// newResetCommand is `kubeboot reset`: it undoes init's files on this node.
// Processes are the kubelet's business (and, in the lab, `lab down`'s).
func newResetCommand(stdout, stderr io.Writer) *cobra.Command {
	opts := &initOptions{output: "text", anyKind: true} // a joined node resets too
	var reset phases.ResetOptions
	cmd := &cobra.Command{
		Use:   "reset",
		Short: "Remove the manifests, wait for the components to stop, then remove the kubeconfigs, PKI, etcd data and kubeboot's own files",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Only a human at a terminal is asked; a script gets a refusal.
			if f, ok := cmd.InOrStdin().(*os.File); ok && term.IsTerminal(int(f.Fd())) {
				reset.Confirm = func(q string) bool { return confirm(f, stderr, q) }
			}
			return runWorkflow(cmd.Context(), opts, stdout, stderr, func(ctx context.Context, s *phases.State) ([]string, error) {
				s.Report.SetPhase("reset")
				res, err := phases.Reset(ctx, s, reset)
				for _, left := range res.Left {
					s.Report.Infof("left %s", left)
				}
				if err != nil {
					return nil, err
				}
				return []string{"reset"}, nil
			})
		},
	}
	flags := cmd.Flags()
	flags.StringVar(&opts.configPath, "config", "", "ClusterConfiguration file")
	flags.BoolVar(&opts.dryRun, "dry-run", false, "remove nothing: report what would be removed")
	flags.StringVar(&opts.root, "root", "", "the node's files are under this directory")
	flags.VarP(&opts.output, "output", "o", "output format: text, or json (one event per line and a final result)")
	flags.BoolVar(&reset.Force, "force", false, "remove the etcd data dir without asking")
	flags.BoolVar(&reset.KeepPKI, "keep-pki", false, "keep the certificates, keys and encryption configuration")
	return cmd
}

// confirm asks a yes/no question on the terminal; anything but yes is no.
func confirm(in io.Reader, out io.Writer, question string) bool {
	_, _ = fmt.Fprintf(out, "%s [y/N] ", question)
	answer, _ := bufio.NewReader(in).ReadString('\n')
	answer = strings.ToLower(strings.TrimSpace(answer))
	return answer == "y" || answer == "yes"
}
