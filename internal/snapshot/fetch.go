package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strings"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/s3store"
	"github.com/kubeboot/kubeboot/phases"
)

// IsS3URL says whether a snapshot to restore is named as a copy in S3
// (s3://<bucket>/<key>), which Fetch brings to the node first, rather than
// as a file.
func IsS3URL(snapshot string) bool { return strings.HasPrefix(snapshot, "s3://") }

// S3Key is the key of the s3:// URL raw in the bucket of c
// (etcd.local.scheduledSnapshots.s3), refused (a usage error) unless the
// configuration names that bucket and the key ends in a name kubeboot
// gives a snapshot. Its errors name `etcd restore`'s --snapshot, which
// takes the URL; a restore checks it before it runs anything.
func S3Key(c *config.ClusterConfiguration, raw string) (string, error) {
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

// Fetch downloads the snapshot at the s3:// URL raw (see S3Key) from the
// configured bucket into the node's snapshot dir, under the name it has
// there, atomically, and returns its path on this machine. A copy already
// there that verifies (a restore run again) is not fetched again; one that
// cannot be verified (a lock held, a read failing) is neither used nor
// replaced: that is an error.
func Fetch(ctx context.Context, s *phases.Node, raw string) (string, error) {
	key, err := S3Key(s.Config, raw)
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
