package hostile

import (
	"fmt"
	"testing"
)

// s3Fields is a bucket in a node's configuration; the endpoint answers
// nothing, so no row may get as far as the network.
const s3Fields = `etcd: {local: {scheduledSnapshots: {s3: {endpoint: "https://127.0.0.1:1", bucket: backups, credentialsFile: %s}}}}` + "\n"

// snapshotRows are careless uses of the scheduled snapshots and of a
// restore from S3: each is refused with the field and the fix, exit 2,
// and nothing on the node changes.
var snapshotRows = []row{
	{
		defect: "31", name: "init refuses an S3 endpoint in clear",
		setup: func(e env) []string {
			c := e.config("c.yaml", `etcd: {local: {scheduledSnapshots: {s3: {endpoint: "http://10.0.0.9:9000", bucket: backups, credentialsFile: /etc/kubeboot/s3}}}}`+"\n")
			return append([]string{"init", "--root", e.node, "--config", c}, skip...)
		},
		code: 2, message: `etcd.local.scheduledSnapshots.s3.endpoint: Invalid value: "http://10.0.0.9:9000": want the store's https URL`,
	},
	{
		defect: "31", name: "init refuses a snapshot schedule every 10 s",
		setup: func(e env) []string {
			c := e.config("c.yaml", "etcd: {local: {scheduledSnapshots: {interval: 10s}}}\n")
			return append([]string{"init", "--root", e.node, "--config", c}, skip...)
		},
		code: 2, message: `etcd.local.scheduledSnapshots.interval: Invalid value: "10s": at least 1m`,
	},
	{
		defect: "31", name: "etcd restore from another bucket is refused before anything runs",
		setup: func(e env) []string {
			c := e.config("c.yaml", fmt.Sprintf(s3Fields, "/etc/kubeboot/s3"))
			return []string{"etcd", "restore", "--config", c, "--snapshot", "s3://elsewhere/cp1/etcd-snapshot-20261126T120000.000Z.db"}
		},
		code: 2, message: `the configuration's bucket is "backups" (etcd.local.scheduledSnapshots.s3.bucket)`,
	},
	{
		defect: "31", name: "etcd restore of a key kubeboot did not name is refused",
		setup: func(e env) []string {
			c := e.config("c.yaml", fmt.Sprintf(s3Fields, "/etc/kubeboot/s3"))
			return []string{"etcd", "restore", "--config", c, "--snapshot", "s3://backups/cp1/../../etc/passwd"}
		},
		code: 2, message: `key "cp1/../../etc/passwd" has an empty, . or .. part`,
	},
	{
		defect: "31", name: "etcd snapshot list --remote with an unreadable credentials file names the field",
		setup: func(e env) []string {
			c := e.config("c.yaml", fmt.Sprintf(s3Fields, e.path("missing-credentials")))
			return []string{"etcd", "snapshot", "list", "--remote", "--config", c}
		},
		code: 2, message: `etcd.local.scheduledSnapshots.s3.credentialsFile`,
	},
	{
		defect: "31", name: "etcd snapshot list --remote refuses a credentials file without the secret",
		setup: func(e env) []string {
			writeFile(e.t, e.path("creds"), "[default]\naws_access_key_id = AKIA0000\n", 0o600)
			c := e.config("c.yaml", fmt.Sprintf(s3Fields, e.path("creds")))
			return []string{"etcd", "snapshot", "list", "--remote", "--config", c}
		},
		code: 2, message: `aws_secret_access_key`,
	},
}

func TestSnapshots(t *testing.T) { runRows(t, snapshotRows) }
