package app

import (
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/day2"
	"github.com/kubeboot/kubeboot/exit"
)

// restoreOptions are the flags of `kubeboot etcd restore`.
type restoreOptions struct {
	deps       deps
	configPath string
	output     outputFormat
	// snapshot is --snapshot, made absolute.
	snapshot string
	// force is --force: restore while other members answer.
	force bool
}

// spec loads the node's configuration, which must run a local etcd member.
func (o *restoreOptions) spec() (runSpec, error) {
	if o.snapshot == "" {
		return runSpec{}, &exit.UsageError{Msg: "etcd restore needs --snapshot FILE: a snapshot `kubeboot etcd snapshot save` wrote (see `kubeboot etcd snapshot list`)"}
	}
	return o.deps.localEtcdSpec(o.configPath, "", "restores", "restore")
}

// newEtcdRestoreCommand is `kubeboot etcd restore`.
func newEtcdRestoreCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	opts := &restoreOptions{deps: d}
	cmd := &cobra.Command{
		Use:   "restore --snapshot FILE",
		Short: "Bring this control-plane node's cluster back from an etcd snapshot, as a new one-member etcd cluster, and wait until the control plane is healthy",
		Long: "restore verifies the snapshot and refuses a corrupt or truncated one before anything changes. It then stops the\n" +
			"control plane (its manifests wait in the backups dir), restores the snapshot into a new data dir beside the old one\n" +
			"(a new cluster ID; the revision moves on, so the API server's watchers relist), swaps the two by renames, starts the\n" +
			"control plane again and waits until it is healthy; only then does the old data dir go. A restore killed at any point\n" +
			"leaves the old data dir or the complete new one: run the same command again to finish it.\n\n" +
			"It refuses while other etcd members answer (--force restores anyway): stop their control planes first. Afterwards they rejoin with `kubeboot reset --force` and\n" +
			"`kubeboot join --control-plane`; workers keep running and need nothing: the CAs and tokens are the same.",
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.snapshot != "" {
				abs, err := filepath.Abs(opts.snapshot)
				if err != nil {
					return &exit.UsageError{Msg: "--snapshot: " + err.Error()}
				}
				opts.snapshot = abs
			}
			restore := day2.EtcdRestore(opts.snapshot, opts.force)
			return d.execute(cmd.Context(), opts.output, stdout, stderr, opts.spec, onNode(restore.Execute))
		},
	}
	addConfigFlag(cmd.Flags(), &opts.configPath)
	addOutputFlag(cmd.Flags(), &opts.output)
	cmd.Flags().StringVar(&opts.snapshot, "snapshot", "", "the snapshot file to restore, as `kubeboot etcd snapshot save` writes it")
	cmd.Flags().BoolVar(&opts.force, "force", false, "restore even while other etcd members answer (they would go on serving the old data)")
	return cmd
}
