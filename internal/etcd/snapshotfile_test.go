package etcd

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
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
			info, err := VerifySnapshot(t.Context(), path)
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
		if _, err := writeSnapshot(t.Context(), bytes.NewReader(bad), path); err == nil || !strings.Contains(err.Error(), "was not kept") {
			t.Fatalf("a bad snapshot was written: %v", err)
		}
		if data, _ := os.ReadFile(path); string(data) != "the previous snapshot" {
			t.Fatalf("a bad snapshot replaced the file: %q", data)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			t.Fatalf("a bad snapshot left files: %v", entries)
		}
	}
	info, err := writeSnapshot(t.Context(), bytes.NewReader(good), path)
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
	list, err := ListSnapshots(t.Context(), dir)
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
	if missing, err := ListSnapshots(t.Context(), filepath.Join(dir, "none")); err != nil || len(missing) != 0 {
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

// craftedDB is a database of many revisions, so that its key bucket has a
// branch page over leaf pages, and its meta page and the key bucket's
// root page.
func craftedDB(t *testing.T) (db []byte, meta boltMeta, keyRoot uint64) {
	t.Helper()
	var changes []change
	for i := range 300 {
		changes = append(changes, change{int64(i + 2), fmt.Sprintf("/registry/k%03d", i), false})
	}
	db = boltDB(t, changes)
	meta, err := readBoltMetas(db)
	if err != nil {
		t.Fatal(err)
	}
	// The root bucket's leaf page holds "key" and "meta"; "key" is first.
	key, value, _, _, err := element(boltPage{buf: db[meta.root*meta.pageSize:][:meta.pageSize], flags: boltLeafPage, count: 2}, 0)
	if err != nil || string(key) != keyBucket {
		t.Fatalf("root bucket: %q, %v", key, err)
	}
	keyRoot = native.Uint64(value)
	if flags := native.Uint16(db[keyRoot*meta.pageSize+8:]); flags != boltBranchPage {
		t.Fatalf("the key bucket's root page %d has flags %#x, want a branch page", keyRoot, flags)
	}
	return db, meta, keyRoot
}

// resum sets the checksums of both meta pages of db, as bbolt computes
// them, so that a crafted meta page opens.
func resum(db []byte, pageSize uint64) {
	for _, off := range []uint64{0, pageSize} {
		m := db[off+boltPageHeader:][:boltMetaSize]
		h := fnv.New64a()
		_, _ = h.Write(m[:boltMetaChecksum])
		native.PutUint64(m[boltMetaChecksum:], h.Sum64())
	}
}

// TestVerifyCraftedSnapshots: a snapshot whose hash is right but whose
// database pages are crafted, as bbolt would read them out of bounds, in
// a loop or into memory it cannot have, is refused as corrupt, quickly,
// and never crashes the verification.
func TestVerifyCraftedSnapshots(t *testing.T) {
	tests := []struct {
		name string
		edit func(db []byte, m boltMeta, root uint64)
		want string
	}{
		{"a branch page that points to itself", func(db []byte, m boltMeta, root uint64) {
			native.PutUint64(db[root*m.pageSize+boltPageHeader+8:], root)
		}, "reached twice"},
		{"a key past the end of its page", func(db []byte, m boltMeta, root uint64) {
			leaf := native.Uint64(db[root*m.pageSize+boltPageHeader+8:])
			native.PutUint32(db[leaf*m.pageSize+boltPageHeader+4:], 0xFFFFFF00)
		}, "past the page's"},
		{"a page of 65535 elements", func(db []byte, m boltMeta, root uint64) {
			native.PutUint16(db[root*m.pageSize+10:], 0xFFFF)
		}, "elements do not fit"},
		{"overflow pages past the file", func(db []byte, m boltMeta, root uint64) {
			native.PutUint32(db[root*m.pageSize+12:], 0xFFFFFFF)
		}, "overflow pages pass page"},
		{"a child page past the file", func(db []byte, m boltMeta, root uint64) {
			native.PutUint64(db[root*m.pageSize+boltPageHeader+8:], 1<<50)
		}, "outside pages 2 to"},
		{"two branch elements over one page", func(db []byte, m boltMeta, root uint64) {
			native.PutUint64(db[root*m.pageSize+boltPageHeader+boltElement+8:], native.Uint64(db[root*m.pageSize+boltPageHeader+8:]))
		}, "reached twice"},
		{"keys out of order", func(db []byte, m boltMeta, root uint64) {
			p := boltPage{buf: db[root*m.pageSize:][:m.pageSize], flags: boltBranchPage, count: 2}
			key, _, _, _, _ := element(p, 1)
			clear(key)
		}, "is out of order"},
		{"a root bucket page past the file", func(db []byte, m boltMeta, _ uint64) {
			native.PutUint64(db[boltPageHeader+16:], 1<<40)
			native.PutUint64(db[m.pageSize+boltPageHeader+16:], 1<<40)
			resum(db, m.pageSize)
		}, "its root bucket is page"},
		{"more pages than the file holds", func(db []byte, m boltMeta, _ uint64) {
			native.PutUint64(db[boltPageHeader+40:], 1<<40)
			native.PutUint64(db[m.pageSize+boltPageHeader+40:], 1<<40)
			resum(db, m.pageSize)
		}, "records 1099511627776 pages"},
		{"a freelist of 2^60 pages", func(db []byte, m boltMeta, _ uint64) {
			fl := db[m.freelist*m.pageSize:]
			native.PutUint16(fl[10:], 0xFFFF)
			native.PutUint64(fl[boltPageHeader:], 1<<60)
		}, "page ids do not fit"},
		{"a huge page size", func(db []byte, m boltMeta, _ uint64) {
			native.PutUint32(db[boltPageHeader+8:], 1<<30)
			resum(db, m.pageSize)
		}, "not a power of two from 512 to 65536"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db, meta, root := craftedDB(t)
			tt.edit(db, meta, root)
			path := filepath.Join(t.TempDir(), "snap.db")
			if err := os.WriteFile(path, withHash(db), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := VerifySnapshot(t.Context(), path)
			if err == nil || !strings.Contains(err.Error(), tt.want) || errors.Is(err, ErrUnverifiable) {
				t.Errorf("err = %v, want a verdict saying %q", err, tt.want)
			}
		})
	}
}

// TestVerifyMutatedSnapshots flips bytes of a database's pages, and of its
// meta page with the checksum set again, thousands of times: every
// verification ends with a verdict and none crashes.
func TestVerifyMutatedSnapshots(t *testing.T) {
	good, meta, _ := craftedDB(t)
	path := filepath.Join(t.TempDir(), "snap.db")
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		db := slices.Clone(good)
		for range 1 + rng.IntN(4) {
			if i%4 == 0 { // a meta field, checksum excluded
				db[boltPageHeader+rng.Uint64N(boltMetaChecksum)] ^= byte(1 + rng.IntN(255))
			} else {
				db[2*meta.pageSize+rng.Uint64N(uint64(len(db))-2*meta.pageSize)] ^= byte(1 + rng.IntN(255))
			}
		}
		resum(db, meta.pageSize)
		if err := os.WriteFile(path, withHash(db), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := VerifySnapshot(t.Context(), path); errors.Is(err, ErrUnverifiable) {
			t.Fatalf("mutation %d: no verdict: %v", i, err)
		}
	}
}

// TestUnverifiableSnapshots: a snapshot whose check cannot run is no
// verdict, and a prune keeps it: another process holds its lock, or it is
// unreadable. A FIFO in its place does not block the check.
func TestUnverifiableSnapshots(t *testing.T) {
	dir := t.TempDir()
	good := withHash(boltDB(t, history))
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	locked, older := filepath.Join(dir, SnapshotName(base.Add(time.Hour))), filepath.Join(dir, SnapshotName(base))
	for _, p := range []string{locked, older} {
		if err := os.WriteFile(p, good, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The lock etcdutl takes to write it, held by an open file of its own.
	f, err := os.Open(locked)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	list, err := ListSnapshots(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Verified || !list[0].Unverifiable || !strings.Contains(list[0].Problem, "another process holds its lock") || !list[1].Verified {
		t.Fatalf("list = %+v", list)
	}
	if remove := SnapshotsToPrune(list, 1); len(remove) != 0 {
		t.Errorf("prune --keep 1 removes %+v, want nothing: the locked snapshot is not known to be bad", remove)
	}

	fifo := filepath.Join(dir, "fifo.db")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifySnapshot(t.Context(), fifo); !errors.Is(err, ErrUnverifiable) || !strings.Contains(err.Error(), "not a regular file: it is a FIFO") {
		t.Errorf("a FIFO: %v", err)
	}
}
