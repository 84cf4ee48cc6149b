// Package snapshot owns making, keeping and fetching a control-plane
// node's etcd snapshots, for every front end alike: `kubeboot etcd
// snapshot save` and `prune` (Save and Prune, operations on a
// phases.Node), `etcd snapshot list` (List, the snapshot dir with the
// schedule's last outcome, and ListRemote, the cluster's copies in S3),
// the scheduled snapshots the kubeboot-etcd-snapshots static pod takes
// (Schedule: every interval a verified snapshot into the snapshot dir, the
// newest kept, each copied to an S3 bucket when one is configured, where
// the newest are kept too), and the fetch of an s3:// snapshot into the
// snapshot dir for `etcd restore` (S3Key, Fetch). The restore itself is
// the control plane's workflow, not this package's.
//
// A snapshot file's mechanics (the save streamed into a temp file,
// verified before its commit, the names kubeboot gives snapshots, the
// listing and the choice of what to prune) are package etcd's; the S3
// client is package s3store's.
//
// Each scheduled round's outcome is written to the snapshot dir's status
// file, which List reads back, so a failing schedule is visible in
// `kubeboot etcd snapshot list`, in the pod's log and in its readiness.
package snapshot
