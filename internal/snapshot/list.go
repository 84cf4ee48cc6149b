package snapshot

import (
	"context"
	"path"
	"slices"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/s3store"
)

// Listing is a node's snapshot dir, as `kubeboot etcd snapshot list`
// shows it.
type Listing struct {
	// Dir is the snapshot dir, as the configuration names it.
	Dir string `json:"dir"`
	// Snapshots are kubeboot's snapshots in it, newest first, each
	// verified or not; never nil.
	Snapshots []etcd.SnapshotEntry `json:"snapshots"`
	// Schedule is the snapshot schedule's last outcome; nil when no
	// schedule has run in Dir.
	Schedule *Status `json:"schedule,omitempty"`
}

// List lists the snapshot dir of c (etcd.local.snapshotsDir, which must be
// set) on this machine, where hostPath places the node's paths: kubeboot's
// snapshots in it, newest first, each verified, and the status file of a
// schedule that ran there.
func List(ctx context.Context, c *config.ClusterConfiguration, hostPath func(string) string) (Listing, error) {
	dir := hostPath(c.Etcd.Local.SnapshotsDir)
	list, err := etcd.ListSnapshots(ctx, dir)
	if err != nil {
		return Listing{}, err
	}
	status, scheduled, err := ReadStatus(dir)
	if err != nil {
		return Listing{}, err
	}
	if list == nil {
		list = []etcd.SnapshotEntry{}
	}
	listing := Listing{Dir: c.Etcd.Local.SnapshotsDir, Snapshots: list}
	if scheduled {
		listing.Schedule = &status
	}
	return listing, nil
}

// Remote is one snapshot copy in the bucket.
type Remote struct {
	// URL is what `etcd restore --snapshot` takes.
	URL string `json:"url"`
	// Size is the object's size in bytes.
	Size int64 `json:"size"`
	// Time is when the snapshot was taken: the time in its name.
	Time time.Time `json:"time"`
}

// ListRemote lists kubeboot's snapshot copies in the bucket of c
// (etcd.local.scheduledSnapshots.s3) under its prefix, every node's,
// newest first by the time in their names; never nil. hostPath places the
// credentials and CA files' paths on this machine. Without a bucket in the
// configuration it is a usage error.
func ListRemote(ctx context.Context, c *config.ClusterConfiguration, hostPath func(string) string) ([]Remote, error) {
	s := c.Etcd.Local.ScheduledSnapshots
	if s == nil || s.S3 == nil {
		return nil, &exit.UsageError{Msg: "etcd snapshot list --remote: etcd.local.scheduledSnapshots.s3 is not set in the configuration: set its endpoint, bucket and credentialsFile"}
	}
	bucket, err := s3store.Open(*s.S3, hostPath)
	if err != nil {
		return nil, err
	}
	objects, err := bucket.List(ctx, s.S3.Prefix)
	if err != nil {
		return nil, err
	}
	list := []Remote{}
	for _, o := range objects {
		if t, ok := etcd.SnapshotTime(path.Base(o.Key)); ok {
			list = append(list, Remote{URL: bucket.URL(o.Key), Size: o.Size, Time: t})
		}
	}
	slices.SortStableFunc(list, func(a, b Remote) int { return b.Time.Compare(a.Time) })
	return list, nil
}
