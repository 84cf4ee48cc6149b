package hostile

import (
	"crypto/sha256"
	"encoding/binary"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// snapshotDir is the default etcd.local.snapshotsDir under a row's node.
const snapshotDir = "node/var/lib/kubeboot/etcd-snapshots"

// snapshotName is a name kubeboot gives a snapshot, taken at hour h.
func snapshotName(h int) string {
	return "etcd-snapshot-20261126T" + string(rune('0'+h/10)) + string(rune('0'+h%10)) + "0000.000Z.db"
}

// etcdSnapshot is a snapshot as etcd's API streams it: a bbolt database
// with an empty key bucket, and the sha256 of the database.
func etcdSnapshot(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket([]byte("key"))
		return err
	})
	if err == nil {
		err = db.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return append(data, sum[:]...)
}

// loopedSnapshot is a snapshot whose hash is right and whose two meta
// pages check, but whose root page is a branch page that points to
// itself: bbolt walks it until memory runs out.
func loopedSnapshot() []byte {
	const pageSize, root = 4096, 2
	db := make([]byte, 3*pageSize)
	le := binary.LittleEndian
	for id := range uint64(2) {
		meta := db[id*pageSize+16:]
		le.PutUint32(meta, 0xED0CDAED) // magic
		le.PutUint32(meta[4:], 2)      // version
		le.PutUint32(meta[8:], pageSize)
		le.PutUint64(meta[16:], root)
		le.PutUint64(meta[32:], ^uint64(0)) // no freelist
		le.PutUint64(meta[40:], 3)          // pages
		le.PutUint64(meta[48:], 2-id)       // txid
		h := fnv.New64a()
		_, _ = h.Write(meta[:56])
		le.PutUint64(meta[56:], h.Sum64())
		le.PutUint64(db[id*pageSize:], id)
	}
	page := db[root*pageSize:]
	le.PutUint64(page, root)
	le.PutUint16(page[8:], 0x01)  // a branch page
	le.PutUint16(page[10:], 1)    // of one element,
	le.PutUint32(page[16:], 16)   // whose key follows it
	le.PutUint32(page[20:], 1)    // and is one byte,
	le.PutUint64(page[24:], root) // over this very page
	sum := sha256.Sum256(db)
	return append(db, sum[:]...)
}

// snapshotFileRows are snapshot files and the schedule's status file that
// are not what they seem: each is refused or reported at once, in bounded
// memory, and none is deleted unless kubeboot knows it is bad.
var snapshotFileRows = []row{
	{
		defect: "snapshots", name: "snapshot list reports a crafted snapshot as malformed, without crashing",
		setup: func(e env) []string {
			writeFile(e.t, e.path(snapshotDir+"/"+snapshotName(1)), string(loopedSnapshot()), 0o600)
			return []string{"etcd", "snapshot", "list", "--root", e.node, "--config", e.config("c.yaml", "")}
		},
		code: 0, within: 20 * time.Second,
		check: func(e env, res result) {
			if !strings.Contains(res.stdout, "NO: ") || !strings.Contains(res.stdout, "its database is malformed: page 2: reached twice") {
				e.t.Errorf("stdout:\n%s\nwant the snapshot reported malformed", res.stdout)
			}
		},
	},
	{
		defect: "snapshots", name: "snapshot list refuses a status file that is a FIFO at once",
		setup: func(e env) []string {
			mkfifo(e.t, e.path(snapshotDir+"/schedule-status.json"))
			return []string{"etcd", "snapshot", "list", "--root", e.node, "--config", e.config("c.yaml", "")}
		},
		code: 1, message: "schedule-status.json\": not a regular file: it is a FIFO (named pipe)", within: 10 * time.Second,
	},
	{
		defect: "snapshots", name: "snapshot list refuses a status file that links to /dev/zero",
		setup: func(e env) []string {
			if err := os.MkdirAll(e.path(snapshotDir), 0o700); err != nil {
				e.t.Fatal(err)
			}
			if err := os.Symlink("/dev/zero", e.path(snapshotDir+"/schedule-status.json")); err != nil {
				e.t.Fatal(err)
			}
			return []string{"etcd", "snapshot", "list", "--root", e.node, "--config", e.config("c.yaml", "")}
		},
		code: 1, message: "schedule-status.json\": not a regular file: it is a character device", within: 10 * time.Second,
	},
	{
		defect: "snapshots", name: "snapshot prune keeps the newest snapshot while another process holds its lock",
		setup: func(e env) []string {
			good := string(etcdSnapshot(e.t))
			writeFile(e.t, e.path(snapshotDir+"/"+snapshotName(1)), good, 0o600)
			writeFile(e.t, e.path(snapshotDir+"/"+snapshotName(2)), good, 0o600)
			// The lock etcdutl holds while it has the file open to write.
			f, err := os.Open(e.path(snapshotDir + "/" + snapshotName(2)))
			if err != nil {
				e.t.Fatal(err)
			}
			e.t.Cleanup(func() { _ = f.Close() })
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
				e.t.Fatal(err)
			}
			return []string{"etcd", "snapshot", "prune", "--keep", "1", "--root", e.node, "--config", e.config("c.yaml", "")}
		},
		code: 0, message: "kept " + snapshotName(2) + ": snapshot", within: 20 * time.Second,
		// The node lock, under run/; no snapshot.
		allowed: []string{"/node/run"},
	},
}

func TestSnapshotFiles(t *testing.T) { runRows(t, snapshotFileRows) }
