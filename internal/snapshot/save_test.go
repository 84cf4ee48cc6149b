package snapshot

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/exit"
)

// TestSaveListPrune saves snapshots of a real etcd with TLS from
// kubeboot's PKI into the node's snapshot dir, reads back their revision
// and keys, lists them with a corrupt one beside them, and prunes: the
// newest that verify stay, the corrupt one goes, and says why.
func TestSaveListPrune(t *testing.T) {
	n, log, endpoint, rev := etcdNode(t)
	ctx := t.Context()
	save := Save(SaveOptions{Endpoint: endpoint})
	if _, err := save.Execute(ctx, n); err != nil {
		t.Fatalf("save: %v\n%s", err, log)
	}
	dir := n.Files.HostPath(n.Config.Etcd.Local.SnapshotsDir)
	snap := n.Snapshot
	if snap == nil || snap.Revision != rev || snap.Keys != 19 || filepath.Dir(snap.Path) != dir || time.Since(snap.Time) > time.Minute {
		t.Fatalf("snapshot %+v, want revision %d and 19 keys in %s", snap, rev, dir)
	}
	if name, _ := etcd.SnapshotTime(filepath.Base(snap.Path)); !name.Equal(snap.Time.Truncate(time.Millisecond)) {
		t.Errorf("snapshot time %s, want the time in its name %s", snap.Time, name)
	}
	if st, err := os.Stat(snap.Path); err != nil || st.Size() != snap.Size || st.Mode().Perm() != 0o600 {
		t.Errorf("snapshot file: %v, %v", st, err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("snapshot dir: %v, %v", st, err)
	}
	if !strings.Contains(log.String(), "saved and verified "+snap.Path) {
		t.Errorf("no line of the save:\n%s", log)
	}
	first := filepath.Base(snap.Path)

	// Out names the file; its name is not kubeboot's, so it is not listed.
	other := filepath.Join(t.TempDir(), "mine.db")
	if _, err := Save(SaveOptions{Out: other, Endpoint: endpoint}).Execute(ctx, n); err != nil || n.Snapshot.Path != other {
		t.Fatalf("save to %s: %v, %+v", other, err, n.Snapshot)
	}
	time.Sleep(2 * time.Millisecond) // names are to the millisecond
	if _, err := save.Execute(ctx, n); err != nil {
		t.Fatalf("second save: %v", err)
	}
	newest := filepath.Base(n.Snapshot.Path)
	corrupt := etcd.SnapshotName(time.Now().UTC().Add(-time.Hour))
	if err := os.WriteFile(filepath.Join(dir, corrupt), []byte("not a snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}

	listing, err := List(ctx, n.Config, n.Files.HostPath)
	if err != nil || listing.Dir != n.Config.Etcd.Local.SnapshotsDir || len(listing.Snapshots) != 3 || listing.Schedule != nil {
		t.Fatalf("list: %+v, %v", listing, err)
	}
	list := listing.Snapshots
	if list[0].Name != newest || list[1].Name != first || list[2].Name != corrupt ||
		!list[0].Verified || !list[1].Verified || list[0].Keys != 19 || list[2].Verified || list[2].Problem == "" {
		t.Errorf("list: %+v", list)
	}

	log.Reset()
	if _, err := Prune(1).Execute(ctx, n); err != nil {
		t.Fatalf("prune: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 || entries[0].Name() != newest {
		t.Errorf("after prune keeping 1: %v, want only %s", entries, newest)
	}
	for _, want := range []string{"removed " + first + "\n", "removed " + corrupt + " (it does not verify: ", "kept 1 of 3 snapshots in " + n.Config.Etcd.Local.SnapshotsDir} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("prune's progress lacks %q:\n%s", want, log)
		}
	}
	if _, err := Prune(0).Execute(ctx, n); exit.Code(err) != exit.Usage {
		t.Errorf("prune keeping 0: %v, want a usage error", err)
	}
}

// TestListOfNoSnapshots: a node without a snapshot dir lists no snapshots,
// as an empty JSON array, and no schedule.
func TestListOfNoSnapshots(t *testing.T) {
	n := newNode(t, t.TempDir(), &bytes.Buffer{}, nil)
	listing, err := List(t.Context(), n.Config, n.Files.HostPath)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(listing)
	if err != nil || string(data) != `{"dir":"/var/lib/kubeboot/etcd-snapshots","snapshots":[]}` {
		t.Errorf("listing of no snapshots: %s, %v", data, err)
	}
}
