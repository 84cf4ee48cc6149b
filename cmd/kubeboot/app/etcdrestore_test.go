package app

import (
	"strings"
	"testing"
)

// TestRestoreFromS3Refusals: a restore from s3:// needs the configuration's
// bucket and a snapshot name kubeboot gives; each refusal says so, exit 2.
func TestRestoreFromS3Refusals(t *testing.T) {
	plain := writeFile(t, t.TempDir(), "node.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nnode: {name: node-1, advertiseAddress: 127.0.0.1}\n")
	withBucket := writeFile(t, t.TempDir(), "node.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nnode: {name: node-1, advertiseAddress: 127.0.0.1}\n"+
		"etcd: {local: {scheduledSnapshots: {s3: {endpoint: \"https://127.0.0.1:1\", bucket: backups, credentialsFile: /nonexistent/credentials}}}}\n")
	for _, tc := range []struct {
		cfg, snapshot, want string
	}{
		{plain, "s3://backups/lab/node-1/etcd-snapshot-20261126T000000.000Z.db", "etcd.local.scheduledSnapshots.s3 is not set"},
		{withBucket, "s3://other/lab/node-1/etcd-snapshot-20261126T000000.000Z.db", `the configuration's bucket is "backups"`},
		{withBucket, "s3://backups/lab/node-1/mine.db", `"mine.db" is no name kubeboot gives a snapshot`},
		{withBucket, "s3://backups", "s3://"},
	} {
		code, _, stderr := runCLI(t, "etcd", "restore", "--snapshot", tc.snapshot, "--config", tc.cfg, "--force")
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("restore --snapshot %s: code %d, %q; want 2 and %q", tc.snapshot, code, stderr, tc.want)
		}
	}
}
