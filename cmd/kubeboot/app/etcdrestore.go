package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/day2"
	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/s3store"
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
	if err == nil && strings.HasPrefix(o.snapshot, "s3://") {
		_, err = s3SnapshotKey(r.config, o.snapshot)
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
			"It refuses while other etcd members answer (--force restores anyway): stop their control planes first. Afterwards they rejoin with `kubeboot reset --force` and\n" +
			"`kubeboot join --control-plane`; workers keep running and need nothing: the CAs and tokens are the same.",
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.snapshot != "" && !strings.HasPrefix(opts.snapshot, "s3://") {
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

// restore downloads an s3:// snapshot into the snapshot dir, then
// restores from the local file.
func (o *restoreOptions) restore(ctx context.Context, s *phases.Node) error {
	snapshot := o.snapshot
	if strings.HasPrefix(snapshot, "s3://") {
		var err error
		if snapshot, err = downloadSnapshot(ctx, s, snapshot); err != nil {
			return err
		}
	}
	return day2.EtcdRestore(snapshot, o.force).Run(ctx, s)
}

// s3SnapshotKey is the key of the s3:// URL raw in the configured bucket,
// refused unless the configuration names that bucket and the key ends in
// a name kubeboot gives a snapshot.
func s3SnapshotKey(c *config.ClusterConfiguration, raw string) (string, error) {
	bucketName, key, err := s3store.ParseURL(raw)
	if err != nil {
		return "", &exit.UsageError{Msg: "--snapshot: " + err.Error()}
	}
	sched := c.Etcd.Local.ScheduledSnapshots
	switch {
	case sched == nil || sched.S3 == nil:
		return "", &exit.UsageError{Msg: "--snapshot " + raw + ": etcd.local.scheduledSnapshots.s3 is not set in the configuration: set its endpoint, bucket and credentialsFile, or download the file and pass its path"}
	case sched.S3.Bucket != bucketName:
		return "", &exit.UsageError{Msg: fmt.Sprintf("--snapshot %s: the configuration's bucket is %q (etcd.local.scheduledSnapshots.s3.bucket): restore from that bucket, or download the file and pass its path", raw, sched.S3.Bucket)}
	}
	if _, ok := etcd.SnapshotTime(path.Base(key)); !ok {
		return "", &exit.UsageError{Msg: fmt.Sprintf("--snapshot %s: %q is no name kubeboot gives a snapshot (etcd-snapshot-<UTC time>.db): download it and pass its path", raw, path.Base(key))}
	}
	return key, nil
}

// downloadSnapshot fetches the snapshot at the s3:// URL raw from the
// configured bucket into the node's snapshot dir, under the name it has
// there, and returns its path on this machine. A copy already there that
// verifies (a restore run again) is not fetched again.
func downloadSnapshot(ctx context.Context, s *phases.Node, raw string) (string, error) {
	key, err := s3SnapshotKey(s.Config, raw)
	if err != nil {
		return "", err
	}
	dir := s.Config.Etcd.Local.SnapshotsDir
	local := s.Files.HostPath(filepath.Join(dir, path.Base(key)))
	switch _, err := etcd.VerifySnapshot(ctx, local); {
	case err == nil:
		s.Report.Infof("%s is already in %s and verifies: not downloading it again", raw, dir)
		return local, nil
	case errors.Is(err, etcd.ErrUnverifiable) && !errors.Is(err, fs.ErrNotExist):
		// Not known to be a bad copy: the download does not replace it.
		return "", err
	}
	bucket, err := s3store.Open(*s.Config.Etcd.Local.ScheduledSnapshots.S3, s.Files.HostPath)
	if err != nil {
		return "", err
	}
	if err := s.Files.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	s.Report.Infof("downloading %s to %s", raw, local)
	if err := bucket.Download(ctx, key, local); err != nil {
		return "", err
	}
	return local, nil
}
