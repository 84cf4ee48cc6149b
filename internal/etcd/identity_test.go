package etcd

import (
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/etcd/server/v3/embed"
)

// identityOf is the member's identity as the running server knows it.
func identityOf(n *etcdNode) Identity {
	return Identity{Member: MemberID(n.etcd.Server.MemberID()), Cluster: MemberID(n.etcd.Server.Cluster().ID())}
}

// TestDataDirIdentity: the data dir of a running member reads as that
// member of its cluster; a dir without a WAL holds no member, and a WAL
// that is not one is an error naming its file.
func TestDataDirIdentity(t *testing.T) {
	m1 := newEtcdNode(t, "m1")
	if _, ok, err := DataDirIdentity(m1.cfg.Dir); ok || err != nil {
		t.Fatalf("a data dir not made yet: ok %t, %v", ok, err)
	}
	m1.start(t)
	if _, err := m1.cli(t).Put(t.Context(), "/k", "v"); err != nil {
		t.Fatal(err)
	}
	got, ok, err := DataDirIdentity(m1.cfg.Dir)
	if err != nil || !ok || got != identityOf(m1) {
		t.Fatalf("DataDirIdentity = %+v, %t, %v; the server says %+v", got, ok, err, identityOf(m1))
	}

	bad := filepath.Join(t.TempDir(), "member", "wal")
	if err := os.MkdirAll(bad, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := DataDirIdentity(filepath.Dir(filepath.Dir(bad))); ok || err != nil {
		t.Errorf("an empty WAL dir: ok %t, %v", ok, err)
	}
	garbage := filepath.Join(bad, "0000000000000000-0000000000000000.wal")
	if err := os.WriteFile(garbage, []byte("\x05\x00\x00\x00\x00\x00\x00\x00hello, not a record"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := DataDirIdentity(filepath.Dir(filepath.Dir(bad))); err == nil || !strings.Contains(err.Error(), garbage) {
		t.Errorf("a WAL file of garbage: %v, want an error naming it", err)
	}
}

// TestNewestPicksTheRestoredCluster: a member restored from a snapshot
// of m1's founds a new cluster; while m1 still answers, Newest picks the
// restored one, by its revision, and names m1 as left behind. m1's data
// dir then reads as another cluster's. With no endpoint answering, it
// fails.
func TestNewestPicksTheRestoredCluster(t *testing.T) {
	m1 := newEtcdNode(t, "m1")
	m1.start(t)
	ctx := t.Context()
	for _, k := range []string{"/a", "/b"} {
		if _, err := m1.cli(t).Put(ctx, k, "v"); err != nil {
			t.Fatal(err)
		}
	}
	stream, err := m1.cli(t).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "snap.db")
	f, err := os.Create(snap)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, stream); err != nil {
		t.Fatal(err)
	}
	_ = stream.Close()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	restored := newEtcdNode(t, "m1")
	if err := Restore(ctx, snap, restored.cfg.Dir, "m1", restored.peer); err != nil {
		t.Fatal(err)
	}
	restored.cfg.ClusterState = embed.ClusterStateFlagExisting
	restored.start(t)

	down := "http://" + freeLocalAddr(t)
	cur, err := Newest(ctx, m1.cli(t), []string{m1.client, down, restored.client})
	if err != nil {
		t.Fatal(err)
	}
	want := identityOf(restored).Cluster
	if cur.Cluster != want || cur.Revision < RestoreRevisionBump || !slices.Equal(cur.Endpoints, []string{restored.client}) ||
		!maps.Equal(cur.Left, map[string]MemberID{m1.client: identityOf(m1).Cluster}) {
		t.Errorf("Newest = %+v, want cluster %s at %s, and %s left of cluster %s", cur, want, restored.client, m1.client, identityOf(m1).Cluster)
	}
	if id, _, err := DataDirIdentity(m1.cfg.Dir); err != nil || id.Cluster == cur.Cluster {
		t.Errorf("m1's data dir reads as %+v (%v), want another cluster than %s", id, err, cur.Cluster)
	}

	if _, err := Newest(ctx, m1.cli(t), []string{down}); err == nil || !strings.Contains(err.Error(), down) {
		t.Errorf("Newest of a member that is down: %v, want an error naming it", err)
	}
}
