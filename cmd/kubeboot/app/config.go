package app

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/config"
)

func newConfigCommand(d deps, stdout io.Writer) *cobra.Command {
	cmd := groupCommand("config", "Print and check kubeboot configuration files")
	cmd.Example = examples(
		"kubeboot config print-defaults > cluster.yaml",
		"kubeboot config validate cluster.yaml",
	)
	cmd.AddCommand(&cobra.Command{
		Use:     "print-defaults",
		Short:   "Print a ClusterConfiguration with every default filled in for this host",
		Example: examples("kubeboot config print-defaults > cluster.yaml"),
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			c, err := d.loadCluster("")
			if err != nil {
				return err
			}
			out, err := config.Marshal(c)
			if err != nil {
				return err
			}
			_, err = stdout.Write(out)
			return err
		},
	}, &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a ClusterConfiguration, JoinConfiguration or WorkerConfiguration file strictly and report every problem",
		Example: examples(
			"kubeboot config validate cluster.yaml",
			"kubeboot config validate worker.yaml",
		),
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(_ *cobra.Command, args []string) error {
			if _, err := d.load(args[0]); err != nil {
				return err
			}
			_, err := fmt.Fprintf(stdout, "%s is valid\n", args[0])
			return err
		},
	})
	return cmd
}
