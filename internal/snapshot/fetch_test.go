package snapshot

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
)

// TestS3Key: a snapshot in S3 must be in the configuration's bucket and
// carry a name kubeboot gives a snapshot; each refusal is a usage error
// that names --snapshot and the fix.
func TestS3Key(t *testing.T) {
	plain := newNode(t, t.TempDir(), &bytes.Buffer{}, nil).Config
	bucket := newNode(t, t.TempDir(), &bytes.Buffer{}, withBucket(config.S3Storage{
		Endpoint: "https://127.0.0.1:1", Bucket: "backups", CredentialsFile: "/nonexistent/credentials"})).Config
	for _, tc := range []struct {
		c        *config.ClusterConfiguration
		raw      string
		key, err string
	}{
		{bucket, "s3://backups/lab/node-1/etcd-snapshot-20261126T000000.000Z.db", "lab/node-1/etcd-snapshot-20261126T000000.000Z.db", ""},
		{plain, "s3://backups/lab/node-1/etcd-snapshot-20261126T000000.000Z.db", "", "--snapshot s3://backups/lab/node-1/etcd-snapshot-20261126T000000.000Z.db: etcd.local.scheduledSnapshots.s3 is not set"},
		{bucket, "s3://other/lab/node-1/etcd-snapshot-20261126T000000.000Z.db", "", `the configuration's bucket is "backups"`},
		{bucket, "s3://backups/lab/node-1/mine.db", "", `"mine.db" is no name kubeboot gives a snapshot`},
		{bucket, "s3://backups", "", `--snapshot: "s3://backups" names no object`},
		{bucket, "s3://backups/cp1/../../etc/passwd", "", `key "cp1/../../etc/passwd" has an empty, . or .. part`},
	} {
		key, err := S3Key(tc.c, tc.raw)
		switch {
		case tc.err == "" && (err != nil || key != tc.key):
			t.Errorf("%s: %q, %v; want %q", tc.raw, key, err, tc.key)
		case tc.err != "" && (exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v; want a usage error with %q", tc.raw, err, tc.err)
		}
	}
	if !IsS3URL("s3://backups/k") || IsS3URL("/var/lib/kubeboot/etcd-snapshots/s3://x") {
		t.Error("IsS3URL")
	}
}

// TestListRemoteNeedsABucket: without a bucket in the configuration,
// listing its copies is a usage error saying what to set, before any
// network.
func TestListRemoteNeedsABucket(t *testing.T) {
	n := newNode(t, t.TempDir(), &bytes.Buffer{}, nil)
	_, err := ListRemote(t.Context(), n.Config, n.Files.HostPath)
	if exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), "etcd.local.scheduledSnapshots.s3 is not set in the configuration") {
		t.Errorf("list remote without a bucket: %v", err)
	}
}
