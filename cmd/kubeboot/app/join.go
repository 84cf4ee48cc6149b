package app

import (
	"context"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/phases"
)

// joinOptions are the flags of `kubeboot join`.
type joinOptions struct {
	initOptions
	controlPlane bool
	bundle       string
	keyFile      string
}

// secrets opens the bundle given with --certs-bundle, or returns nil
// without one: a re-run uses the CAs on the node.
func (o *joinOptions) secrets() (map[string][]byte, error) {
	if o.bundle == "" && o.keyFile == "" {
		return nil, nil
	}
	return openBundle(o.bundle, o.keyFile)
}

func newJoinCommand(stdout, stderr io.Writer) *cobra.Command {
	opts := &joinOptions{initOptions: initOptions{output: "text", join: true}}
	cmd := &cobra.Command{
		Use:   "join --control-plane --config F --certs-bundle B --key-file K",
		Short: "Join this node to a cluster as another control-plane node with a stacked etcd member",
		Long: "join adds this node to a cluster made by `kubeboot init`. It imports the cluster secrets from a bundle\n" +
			"made by `kubeboot certs export`, issues this node's certificates and kubeconfigs, adds its etcd member\n" +
			"as a learner, starts it, promotes it once it has caught up, then starts the API server, controller\n" +
			"manager and scheduler. Re-running it on a joined node changes nothing; a join that stopped halfway\n" +
			"resumes. Phases: " + strings.Join(phases.JoinControlPlane(opts.joinConfig, nil).Names(), ", "),
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !opts.controlPlane {
				return &phases.UsageError{Msg: "only control-plane nodes can join: pass --control-plane"}
			}
			secrets, err := opts.secrets()
			if err != nil {
				return err
			}
			return runWorkflow(cmd.Context(), &opts.initOptions, stdout, stderr, func(ctx context.Context, s *phases.State) ([]string, error) {
				return phases.JoinControlPlane(opts.joinConfig, secrets).Run(ctx, s, opts.skipPhases)
			})
		},
	}
	addJoinFlags(cmd, opts)
	cmd.Flags().StringVar(&opts.configPath, "config", "", "JoinConfiguration file")
	cmd.Flags().VarP(&opts.output, "output", "o", "output format: text, or json (one event per line and a final result)")
	cmd.Flags().BoolVar(&opts.strict, "strict", false, "treat preflight warnings as errors")
	cmd.Flags().StringSliceVar(&opts.ignoreErrors, "ignore-preflight-errors", nil, "preflight checks to report as warnings only, or all")
	cmd.Flags().StringSliceVar(&opts.skipPhases, "skip-phases", nil, "phases to skip")
	return cmd
}

// addJoinFlags adds the flags join and `lab up --join` share.
func addJoinFlags(cmd *cobra.Command, opts *joinOptions) {
	cmd.Flags().BoolVar(&opts.controlPlane, "control-plane", false, "join as a control-plane node (the only kind kubeboot joins)")
	cmd.Flags().StringVar(&opts.bundle, "certs-bundle", "", "the bundle file written by kubeboot certs export")
	cmd.Flags().StringVar(&opts.keyFile, "key-file", "", "the file holding the bundle key (64 hex digits)")
}
