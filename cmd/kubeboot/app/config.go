package app

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/fleet"
)

func newConfigCommand(d deps, stdout io.Writer) *cobra.Command {
	cmd := groupCommand("config", "Print and check kubeboot configuration files")
	cmd.Example = examples(
		"kubeboot config print-defaults > cluster.yaml",
		"kubeboot config validate cluster.yaml",
		"kubeboot config fleet --cluster fleet.yaml --out /srv/fleet",
	)
	cmd.AddCommand(newConfigFleetCommand(stdout), &cobra.Command{
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

// configFleetOptions are the flags of `kubeboot config fleet`.
type configFleetOptions struct {
	cluster, out string
	output       outputFormat
}

// newConfigFleetCommand is `kubeboot config fleet`.
func newConfigFleetCommand(stdout io.Writer) *cobra.Command {
	opts := &configFleetOptions{}
	cmd := &cobra.Command{
		Use:   "fleet --cluster FILE --out DIR",
		Short: "Write every node's file of a fleet, with the token, certificate key and CA they share, made once",
		Example: examples(
			"kubeboot config fleet --cluster examples/fleet.yaml --out /srv/fleet",
			"kubeboot config fleet --cluster fleet.yaml --out /srv/fleet -o json",
		),
		Long: "fleet reads a Fleet (examples/fleet.yaml: the cluster's settings and its nodes) and writes into DIR every\n" +
			"node's file, nodes/<name>.yaml (mode 0600): the first control-plane node's ClusterConfiguration, carrying the\n" +
			"cluster CA, the other control-plane nodes' JoinConfiguration and the workers' WorkerConfiguration, pinning that\n" +
			"CA. The secrets they share are made on the first run and kept in DIR: bootstrap-token, certificate-key, ca.crt and\n" +
			"ca.key (0600), and ca-cert-hash, the pin. A second run changes no byte; a node added to the description gets its\n" +
			"file alone. Every node's file is checked as its node will load it, and nothing is written unless all are valid.",
		Args: usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			if opts.cluster == "" || opts.out == "" {
				return &exit.UsageError{Msg: "--cluster and --out are required: kubeboot config fleet --cluster fleet.yaml --out DIR"}
			}
			d, err := fleet.Load(opts.cluster)
			if err != nil {
				return err
			}
			r, err := fleet.Generate(d, opts.out)
			if err != nil {
				return err
			}
			if opts.output == "json" {
				return json.NewEncoder(stdout).Encode(r)
			}
			for _, name := range r.Written {
				if _, err := fmt.Fprintf(stdout, "wrote %s\n", filepath.Join(r.Dir, name)); err != nil {
					return err
				}
			}
			_, err = fmt.Fprintf(stdout, "%d files written, %d unchanged; the nodes pin the CA %s\n", len(r.Written), len(r.Unchanged), r.CACertHash)
			return err
		},
	}
	cmd.Flags().StringVar(&opts.cluster, "cluster", "", "the fleet's description (kind Fleet)")
	cmd.Flags().StringVar(&opts.out, "out", "", "the directory of the fleet's files and secrets; made if missing")
	addOutputFlag(cmd.Flags(), &opts.output)
	return cmd
}
