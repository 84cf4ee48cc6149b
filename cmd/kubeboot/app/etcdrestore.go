package app

import (
	"context"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/controlplane"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/snapshot"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
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
	r, err := o.deps.localEtcdSpec(o.configPath, "", "restores", "restore")
	if err == nil && snapshot.IsS3URL(o.snapshot) {
		_, err = snapshot.S3Key(r.config, o.snapshot)
	}
	return r, err
}

// newEtcdRestoreCommand is `kubeboot etcd restore`.
func newEtcdRestoreCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	opts := &restoreOptions{deps: d}
	cmd := &cobra.Command{
		Use:   "restore --snapshot FILE|s3://BUCKET/KEY",
		Short: "Bring this control-plane node's cluster back from an etcd snapshot, as a new one-member etcd cluster, and wait until the control plane is healthy",
		Example: examples(
			"kubeboot etcd restore --config cluster.yaml --snapshot /var/lib/kubeboot/etcd-snapshots/etcd-snapshot-20261126T120000.000Z.db",
			"kubeboot etcd restore --config cluster.yaml --snapshot s3://kubeboot-snapshots/clusters/prod/cp1/etcd-snapshot-20261126T120000.000Z.db",
		),
		Long: "restore verifies the snapshot and refuses a corrupt or truncated one before anything changes. It then stops the\n" +
			"control plane (its manifests wait in the backups dir), restores the snapshot into a new data dir beside the old one\n" +
			"(a new cluster ID; the revision moves on, so the API server's watchers relist), swaps the two by renames, starts the\n" +
			"control plane again and waits until it is healthy; only then does the old data dir go. A restore killed at any point\n" +
			"leaves the old data dir or the complete new one: run the same command again to finish it.\n\n" +
			"A snapshot given as s3://<bucket>/<key> is first downloaded from etcd.local.scheduledSnapshots.s3 into the snapshot\n" +
			"dir (a copy already there that verifies is used as it is).\n\n" +
			"It refuses while other etcd members answer (--force restores anyway): stop their control planes first. Afterwards they\n" +
			"rejoin by themselves: their next bootstrap (the bootstrap unit, at boot) or `kubeboot join --control-plane` finds the\n" +
			"restored cluster, moves the old member's data aside and joins it as a new member. Workers keep running and need\n" +
			"nothing: the CAs and tokens are the same.",
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.snapshot != "" && !snapshot.IsS3URL(opts.snapshot) {
				abs, err := filepath.Abs(opts.snapshot)
				if err != nil {
					return &exit.UsageError{Msg: "--snapshot: " + err.Error()}
				}
				opts.snapshot = abs
			}
			restore := workflow.Operation[*phases.Node]{Name: "etcd-restore", Run: opts.restore}
			return d.execute(cmd.Context(), opts.output, stdout, stderr, opts.spec, onNode(restore.Execute))
		},
	}
	addConfigFlag(cmd.Flags(), &opts.configPath)
	addOutputFlag(cmd.Flags(), &opts.output)
	cmd.Flags().StringVar(&opts.snapshot, "snapshot", "", "the `FILE` to restore: a snapshot as kubeboot etcd snapshot save writes it, or a copy in etcd.local.scheduledSnapshots.s3's bucket, s3://<bucket>/<key> (see etcd snapshot list --remote)")
	cmd.Flags().BoolVar(&opts.force, "force", false, "restore even while other etcd members answer (they would go on serving the old data)")
	return cmd
}

// restore fetches an s3:// snapshot into the snapshot dir, then restores
// from the local file.
func (o *restoreOptions) restore(ctx context.Context, s *phases.Node) error {
	file := o.snapshot
	if snapshot.IsS3URL(file) {
		var err error
		if file, err = snapshot.Fetch(ctx, s, file); err != nil {
			return err
		}
	}
	return controlplane.EtcdRestore(file, o.force).Run(ctx, s)
}
