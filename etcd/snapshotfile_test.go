package etcd

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// change is one write of etcd's key bucket: key at a main revision, or
// its deletion.
type change struct {
	rev    int64
	key    string
	delete bool
}

// revisionKey lays out a revision as etcd does: main, '_', sub, and 't'
// for a deletion.
func revisionKey(main int64, tombstone bool) []byte {
	k := make([]byte, revisionLen, tombstoneLen)
	binary.BigEndian.PutUint64(k, uint64(main))
	k[8] = '_'
	if tombstone {
		k = append(k, 't')
	}
	return k
}

// boltDB builds a bbolt database whose buckets hold changes in the key
// bucket (or, for a nil changes, no key bucket) and returns its bytes.
func boltDB(t *testing.T, changes []change, extra ...[]byte) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucket([]byte("meta")); err != nil {
			return err
		}
		if changes == nil {
			return nil
		}
		b, err := tx.CreateBucket([]byte(keyBucket))
		if err != nil {
			return err
		}
		for _, c := range changes {
			kv := mvccpb.KeyValue{Key: []byte(c.key), ModRevision: c.rev}
			if !c.delete {
				kv.Value, kv.CreateRevision, kv.Version = []byte("v"), c.rev, 1
			}
			v, err := kv.Marshal()
			if err != nil {
				return err
			}
			if err := b.Put(revisionKey(c.rev, c.delete), v); err != nil {
				return err
			}
		}
		for _, k := range extra {
			if err := b.Put(k, []byte{}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// withHash appends the sha256 of data, as etcd's Maintenance API does.
func withHash(data []byte) []byte {
	sum := sha256.Sum256(data)
	return append(slices.Clone(data), sum[:]...)
}

// history writes a, b and c, rewrites a and deletes b: revision 6, two
// live keys.
var history = []change{{2, "a", false}, {3, "b", false}, {4, "a", false}, {5, "c", false}, {6, "b", true}}

func TestVerifySnapshot(t *testing.T) {
	good := withHash(boltDB(t, history))
	corrupt := slices.Clone(good)
	corrupt[len(corrupt)/2] ^= 0xff
	tests := []struct {
		name string
		data []byte
		want string // "" for valid
	}{
		{"good", good, ""},
		{"truncated anywhere", good[:len(good)-100], "no integrity hash"},
		{"truncated by whole sectors", good[:len(good)-512], "corrupt: the sha256 of its database is"},
		{"one byte changed", corrupt, "corrupt: the sha256 of its database is"},
		{"no hash", boltDB(t, history), "no integrity hash"},
		{"empty", nil, "no integrity hash"},
		{"hashed, but not bbolt", withHash(make([]byte, 4096)), "does not open as a bbolt database"},
		{"no key bucket", withHash(boltDB(t, nil)), `no "key" bucket`},
		{"a key that is no revision", withHash(boltDB(t, history, []byte("not-a-revision"))), "not a revision"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "snap.db")
			if err := os.WriteFile(path, tt.data, 0o600); err != nil {
				t.Fatal(err)
			}
			info, err := VerifySnapshot(path)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
					t.Fatalf("err = %v, want one naming %s and saying %q", err, path, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := SnapshotInfo{Path: path, Size: int64(len(tt.data)), Revision: 6, Keys: 2}
			if info != want {
				t.Errorf("info = %+v, want %+v", info, want)
			}
		})
	}
}

// TestWriteSnapshotKeepsOnlyAVerifiedFile: a snapshot that does not
// verify never takes the place of the file at its path, and leaves no
// temp file; one that does replaces it, mode 0600.
func TestWriteSnapshotKeepsOnlyAVerifiedFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "snap.db")
	if err := os.WriteFile(path, []byte("the previous snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := withHash(boltDB(t, history))
	for _, bad := range [][]byte{good[:len(good)-1], boltDB(t, history)} {
		if _, err := writeSnapshot(bytes.NewReader(bad), path); err == nil || !strings.Contains(err.Error(), "was not kept") {
			t.Fatalf("a bad snapshot was written: %v", err)
		}
		if data, _ := os.ReadFile(path); string(data) != "the previous snapshot" {
			t.Fatalf("a bad snapshot replaced the file: %q", data)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			t.Fatalf("a bad snapshot left files: %v", entries)
		}
	}
	info, err := writeSnapshot(bytes.NewReader(good), path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Path != path || info.Revision != 6 || info.Keys != 2 || info.Size != int64(len(good)) {
		t.Errorf("info = %+v", info)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 || st.Size() != int64(len(good)) {
		t.Errorf("snapshot file: %v, %v", st, err)
	}
}

func TestSnapshotNames(t *testing.T) {
	at := time.Date(2025, 3, 4, 5, 6, 7, 891_000_000, time.FixedZone("x", 3600))
	name := SnapshotName(at)
	if name != "etcd-snapshot-20250304T040607.891Z.db" {
		t.Fatalf("name = %q", name)
	}
	if got, ok := SnapshotTime(name); !ok || !got.Equal(at) {
		t.Errorf("SnapshotTime(%q) = %v, %v", name, got, ok)
	}
	for _, other := range []string{"etcd-snapshot-20250304T040607Z.db", "etcd-snapshot-junk.db", "x" + name, name + ".bak", ".etcd-snapshot-20250304T040607.891Z.db.tmp-1"} {
		if _, ok := SnapshotTime(other); ok {
			t.Errorf("%q taken for one of kubeboot's snapshots", other)
		}
	}
}

// TestListAndPruneSnapshots: list shows kubeboot's snapshots newest first,
// whether each verifies; prune keeps the newest that verify and removes
// the rest of kubeboot's, never another file.
func TestListAndPruneSnapshots(t *testing.T) {
	dir := t.TempDir()
	good := withHash(boltDB(t, history))
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	write := func(name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Written out of order: the order comes from the names' times.
	for _, h := range []int{2, 0, 1} {
		write(SnapshotName(base.Add(time.Duration(h)*time.Hour)), good)
	}
	write(SnapshotName(base.Add(3*time.Hour)), good[:len(good)-1]) // the newest is truncated
	write("notes.txt", []byte("mine"))
	write("etcd-snapshot-mine.db", good)
	list, err := ListSnapshots(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range list {
		got = append(got, e.Time.Format("15")+map[bool]string{true: " ok", false: " bad"}[e.Verified])
		if e.Verified && (e.Revision != 6 || e.Keys != 2 || e.Size != int64(len(good))) {
			t.Errorf("entry %+v", e)
		}
		if !e.Verified && (!strings.Contains(e.Problem, "no integrity hash") || e.Size != int64(len(good)-1)) {
			t.Errorf("entry %+v", e)
		}
	}
	if want := []string{"03 bad", "02 ok", "01 ok", "00 ok"}; !slices.Equal(got, want) {
		t.Fatalf("list = %v, want %v", got, want)
	}
	var removed []string
	for _, e := range SnapshotsToPrune(list, 2) {
		removed = append(removed, e.Time.Format("15"))
	}
	if want := []string{"03", "00"}; !slices.Equal(removed, want) {
		t.Errorf("prune --keep 2 removes %v, want %v", removed, want)
	}
	if n := len(SnapshotsToPrune(list, 5)); n != 1 {
		t.Errorf("prune --keep 5 removes %d, want only the bad one", n)
	}
	if missing, err := ListSnapshots(filepath.Join(dir, "none")); err != nil || len(missing) != 0 {
		t.Errorf("a missing dir: %v, %v", missing, err)
	}
}

// TestSaveSnapshotOfARealMember saves a snapshot of a running member and
// reads back its revision and key count; etcdutl, when built, agrees.
func TestSaveSnapshotOfARealMember(t *testing.T) {
	n := newEtcdNode(t, "m1")
	n.start(t)
	cli := n.cli(t)
	ctx := t.Context()
	for i := range 10 {
		if _, err := cli.Put(ctx, "/registry/k"+string(rune('0'+i)), "v"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Put(ctx, "/registry/k0", "again"); err != nil {
		t.Fatal(err)
	}
	del, err := cli.Delete(ctx, "/registry/k1")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), SnapshotName(time.Now()))
	info, err := saveSnapshot(ctx, cli, n.client, path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Revision != del.Header.Revision || info.Keys != 9 || info.Path != path || time.Since(info.Time) > time.Minute {
		t.Errorf("info = %+v, want revision %d and 9 keys", info, del.Header.Revision)
	}
	if st, err := os.Stat(path); err != nil || st.Size() != info.Size {
		t.Errorf("file: %v, %v; info %+v", st, err, info)
	}
	etcdutl := filepath.Join(os.Getenv("KUBEBOOT_BIN_DIR"), "etcdutl")
	if _, err := os.Stat(etcdutl); os.Getenv("KUBEBOOT_BIN_DIR") == "" || err != nil {
		return
	}
	out, err := exec.Command(etcdutl, "snapshot", "status", path, "-w", "json").Output()
	if err != nil {
		t.Fatalf("etcdutl snapshot status: %v", err)
	}
	var status struct {
		Revision int64 `json:"revision"`
		TotalKey int   `json:"totalKey"`
	}
	if err := json.Unmarshal(out, &status); err != nil || status.Revision != info.Revision || status.TotalKey != info.Keys {
		t.Errorf("etcdutl says %s (%v), kubeboot %+v", out, err, info)
	}
}

// TestSaveSnapshotOfNoEtcd: an etcd that does not answer is an error that
// says so, and leaves no file.
func TestSaveSnapshotOfNoEtcd(t *testing.T) {
	endpoint := "http://" + freeLocalAddr(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	dir := t.TempDir()
	_, err = saveSnapshot(t.Context(), cli, endpoint, filepath.Join(dir, "snap.db"))
	if err == nil || !strings.Contains(err.Error(), "etcd at "+endpoint+" does not answer") {
		t.Fatalf("err = %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files left: %v", entries)
	}
}
