package etcd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestRestoreARealSnapshot: a snapshot of a real member restores into a
// new data dir from which a new one-member cluster starts, holding the
// snapshot's keys (not those written after it), a revision moved well past
// the snapshot's and a new cluster ID; an existing dir is never written.
func TestRestoreARealSnapshot(t *testing.T) {
	n := newEtcdNode(t, "m1")
	n.start(t)
	cli := n.cli(t)
	ctx := t.Context()
	if _, err := cli.Put(ctx, "/registry/kept", "v1"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), SnapshotName(time.Now()))
	info, err := saveSnapshot(ctx, cli, n.client, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/registry/after", "v2"); err != nil {
		t.Fatal(err)
	}
	oldID := n.etcd.Server.Cluster().ID()

	restored := newEtcdNode(t, "m1")
	if err := Restore(ctx, path, restored.cfg.Dir, "m1", restored.peer); err != nil {
		t.Fatal(err)
	}
	restored.start(t)
	rcli := restored.cli(t)
	got, err := rcli.Get(ctx, "/registry/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range got.Kvs {
		keys = append(keys, string(kv.Key))
	}
	if strings.Join(keys, ",") != "/registry/kept" {
		t.Errorf("restored keys %v, want the snapshot's /registry/kept only", keys)
	}
	if got.Header.Revision < info.Revision+RestoreRevisionBump {
		t.Errorf("restored revision %d, want at least the snapshot's %d + %d", got.Header.Revision, info.Revision, RestoreRevisionBump)
	}
	if id := restored.etcd.Server.Cluster().ID(); id == oldID {
		t.Errorf("the restored cluster kept the old cluster ID %x", id)
	}
	if voters, learners := members(t, rcli); len(voters) != 1 || len(learners) != 0 {
		t.Errorf("restored members: voters %v, learners %v; want m1 alone", voters, learners)
	}

	// A restore never writes into an existing dir.
	existing := t.TempDir()
	if err := Restore(ctx, path, existing, "m1", restored.peer); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("restore into an existing dir: %v", err)
	}
	if entries, _ := os.ReadDir(existing); len(entries) != 0 {
		t.Errorf("the existing dir got %d entries", len(entries))
	}
}
