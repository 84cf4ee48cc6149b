package etcd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kubeboot/kubeboot/internal/atomicfile"
	"github.com/kubeboot/kubeboot/internal/inputfile"
)

// A snapshot file is what etcd's Maintenance API streams: the member's
// bbolt database followed by the sha256 of the database. etcdutl's restore
// recognises the hash by the file's size (a database is a whole number of
// 512-byte sectors, so a size of 32 more than such a multiple means a hash
// follows) and refuses a file without one or whose hash does not match;
// etcdutl's snapshot status opens the database, checks its pages, and
// reads the revision and the live keys from its key bucket. A kubeboot
// snapshot must pass all of these before it is kept or reported.

// SnapshotInfo describes a snapshot file that verified.
type SnapshotInfo struct {
	// Path is the snapshot's file.
	Path string `json:"path"`
	// Size is the file's size in bytes, hash included.
	Size int64 `json:"size"`
	// Revision is the newest revision in the snapshot.
	Revision int64 `json:"revision"`
	// Keys is the number of keys the snapshot holds (deleted keys not
	// counted), as etcdutl's snapshot status counts them.
	Keys int `json:"keys"`
	// Time is when the snapshot was taken: the time in its name, or the
	// start of the save for a file named with --out.
	Time time.Time `json:"time"`
}

// SnapshotEntry is one of kubeboot's snapshots in a directory, verified
// or not.
type SnapshotEntry struct {
	// Name is the file's name in the directory.
	Name string `json:"name"`
	SnapshotInfo
	// Verified says whether the file passed every check.
	Verified bool `json:"verified"`
	// Unverifiable says that the checks could not run to a verdict (see
	// ErrUnverifiable): the file is neither good nor known to be corrupt,
	// and a prune keeps it.
	Unverifiable bool `json:"unverifiable,omitempty"`
	// Problem is why it did not verify, when Verified is false.
	Problem string `json:"problem,omitempty"`
}

const (
	// snapshotPrefix and snapshotSuffix frame the time in the name of a
	// snapshot kubeboot takes into its snapshot directory.
	snapshotPrefix = "etcd-snapshot-"
	snapshotSuffix = ".db"
	// snapshotLayout is that time, UTC to the millisecond, so that names
	// sort as the times do.
	snapshotLayout = "20060102T150405.000Z"
	// snapshotMode is a snapshot's mode: it holds every Secret.
	snapshotMode = 0o600
	// keyBucket is etcd's bucket of revisions: each key is a revision
	// (8 bytes of main revision, '_', 8 bytes of sub revision, then 't'
	// for a deletion) and each value the protobuf KeyValue written then.
	keyBucket = "key"
	// revisionLen and tombstoneLen are the lengths of a revision key,
	// without and with its deletion mark.
	revisionLen, tombstoneLen = 17, 18
)

// SnapshotName is the file name of a snapshot taken at t in the snapshot
// directory.
func SnapshotName(t time.Time) string {
	return snapshotPrefix + t.UTC().Format(snapshotLayout) + snapshotSuffix
}

// SnapshotTime is the time in name, and whether name is one SnapshotName
// gives: only such files are kubeboot's to list and prune.
func SnapshotTime(name string) (time.Time, bool) {
	stamp, ok := strings.CutPrefix(name, snapshotPrefix)
	if !ok {
		return time.Time{}, false
	}
	if stamp, ok = strings.CutSuffix(stamp, snapshotSuffix); !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(snapshotLayout, stamp)
	if err != nil || t.Format(snapshotLayout) != stamp {
		return time.Time{}, false
	}
	return t, true
}

// SaveSnapshot takes a consistent snapshot of the member at endpoint
// (Maintenance.Snapshot, as `etcdctl snapshot save`) and streams it to
// path: into a temp file in path's directory, synced, verified (see
// VerifySnapshot), then renamed over path and the directory synced. A
// snapshot that does not verify is removed and never takes path's place.
// An etcd that does not answer is an error that says so.
func SaveSnapshot(ctx context.Context, endpoint string, files TLSFiles, path string) (SnapshotInfo, error) {
	cli, err := New(ctx, []string{endpoint}, files)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("snapshot etcd: %w", err)
	}
	defer func() { _ = cli.Close() }()
	return saveSnapshot(ctx, cli, endpoint, path)
}

// saveSnapshot is SaveSnapshot with a client.
func saveSnapshot(ctx context.Context, cli *clientv3.Client, endpoint, path string) (SnapshotInfo, error) {
	start := time.Now().UTC()
	checkCtx, cancel := context.WithTimeout(ctx, statusTimeout)
	_, err := cli.Status(checkCtx, endpoint)
	cancel()
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("etcd at %s does not answer (%w): is its member running and is the endpoint right?", endpoint, err)
	}
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("snapshot etcd at %s: %w", endpoint, err)
	}
	defer func() { _ = rc.Close() }()
	info, err := writeSnapshot(ctx, rc, path)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("snapshot etcd at %s: %w", endpoint, err)
	}
	info.Time = start
	return info, nil
}

// writeSnapshot streams r into path atomically (package atomicfile), and
// keeps it only once it verifies: the temp file is verified before it is
// committed. On any failure the temp file is removed and path is as it was.
func writeSnapshot(ctx context.Context, r io.Reader, path string) (SnapshotInfo, error) {
	f, err := atomicfile.Create(path, snapshotMode)
	if err != nil {
		return SnapshotInfo{}, err
	}
	defer f.Abort()
	if _, err := io.Copy(f, r); err != nil {
		return SnapshotInfo{}, fmt.Errorf("write %s: %w", f.Name(), err)
	}
	info, err := VerifySnapshot(ctx, f.Name())
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("the snapshot etcd sent does not verify, so it was not kept: %w", err)
	}
	// Commit syncs the file, renames it over path and syncs the directory;
	// a failure of that last sync leaves the snapshot in place, its
	// durability unconfirmed, and says so.
	if err := f.Commit(); err != nil {
		return SnapshotInfo{}, err
	}
	info.Path = path
	return info, nil
}

// ErrUnverifiable is wrapped by VerifySnapshot's error when the checks
// could not run to a verdict: another process holds the file's lock, it
// cannot be opened or read, it is not a regular file or is larger than a
// snapshot can be, or it changed while it was read. Such a file is not
// known to be corrupt, and is never pruned.
var ErrUnverifiable = errors.New("could not be verified")

// VerifySnapshot checks the snapshot file at path as etcdutl's restore and
// snapshot status would: it ends with the sha256 of the rest, the rest is
// a bbolt database whose pages check, and its key bucket holds valid
// revisions. It returns the file's size, newest revision and key count
// (Time is left zero). A truncated, corrupt or hashless file is an error
// that says which; a check that could not run wraps ErrUnverifiable.
//
// Nothing parses the file before it is known to be a regular file of at
// most inputfile.SnapshotLimit bytes, opened without blocking (a FIFO
// cannot hang it), whose hash matches and whose pages pass checkBolt,
// which reads them bounded and cannot crash; bbolt itself never opens it.
// It ends when ctx does.
func VerifySnapshot(ctx context.Context, path string) (info SnapshotInfo, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("snapshot %s: %w", path, err)
		}
	}()
	f, err := inputfile.Open(path, inputfile.SnapshotLimit)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("%w: %w", ErrUnverifiable, err)
	}
	defer func() { _ = f.Close() }()
	// The shared lock bbolt takes to read: a writer holds it exclusively.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return SnapshotInfo{}, fmt.Errorf("%w: another process holds its lock (it has the database open for writing, as etcdutl does): try again once it is done: %w", ErrUnverifiable, err)
	}
	size, err := checkSnapshotHash(ctx, f)
	if err != nil {
		return SnapshotInfo{}, err
	}
	rev, keys, err := readSnapshotKeys(ctx, f, size-sha256.Size)
	if err != nil {
		return SnapshotInfo{}, err
	}
	return SnapshotInfo{Path: path, Size: size, Revision: rev, Keys: keys}, nil
}

// checkSnapshotHash checks that the open file ends with the sha256 of the
// rest, and returns its size.
func checkSnapshotHash(ctx context.Context, f *os.File) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrUnverifiable, err)
	}
	size := st.Size()
	if size%512 != sha256.Size {
		return 0, fmt.Errorf("no integrity hash: its size, %d bytes, is not a whole number of 512-byte sectors and a 32-byte sha256, "+
			"so it is truncated or was not taken through etcd's snapshot API", size)
	}
	h := sha256.New()
	want := make([]byte, sha256.Size)
	r := contextReader{ctx, f}
	if _, err := io.CopyN(h, r, size-sha256.Size); err != nil {
		return 0, fmt.Errorf("%w: read: %w", ErrUnverifiable, err)
	}
	if _, err := io.ReadFull(r, want); err != nil {
		return 0, fmt.Errorf("%w: read its hash: %w", ErrUnverifiable, err)
	}
	if got := h.Sum(nil); !bytes.Equal(got, want) {
		return 0, fmt.Errorf("corrupt: the sha256 of its database is %x, but the file records %x", got, want)
	}
	return size, nil
}

// contextReader reads r until ctx ends.
type contextReader struct {
	ctx context.Context
	r   io.Reader
}

func (c contextReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// readSnapshotKeys checks the database, the first dbSize bytes of f, with
// checkBolt, and reads the newest revision and the number of live keys
// from its key bucket: a key whose latest revision is a deletion is not
// counted. The database is mapped read-only; a fault reading it (the file
// truncated meanwhile) is caught as a panic and is no verdict.
func readSnapshotKeys(ctx context.Context, f *os.File, dbSize int64) (rev int64, keys int, err error) {
	if dbSize < 2*boltMinPageSize {
		return 0, 0, fmt.Errorf("does not open as a bbolt database: it is %d bytes, too short for its two meta pages", dbSize)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(dbSize), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: map its database: %w", ErrUnverifiable, err)
	}
	defer func() { _ = syscall.Munmap(data) }()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if _, fault := r.(interface{ Addr() uintptr }); fault {
				err = fmt.Errorf("%w: the file changed while it was read: %v", ErrUnverifiable, r)
			} else {
				err = fmt.Errorf("its database is malformed: %v", r)
			}
		}
	}()
	live := map[string]bool{}
	err = checkBolt(ctx, data, func(k, v []byte, bucket bool) error {
		if bucket {
			return fmt.Errorf("its key bucket holds a bucket, %x", k)
		}
		main, tombstone, err := parseRevision(k)
		if err != nil {
			return err
		}
		var kv mvccpb.KeyValue
		if err := kv.Unmarshal(v); err != nil {
			return fmt.Errorf("the value at revision %d is not a KeyValue: %w", main, err)
		}
		rev = main
		if tombstone {
			delete(live, string(kv.Key))
		} else {
			live[string(kv.Key)] = true
		}
		return nil
	})
	if ctx.Err() != nil {
		return 0, 0, fmt.Errorf("%w: %w", ErrUnverifiable, ctx.Err())
	}
	return rev, len(live), err
}

// parseRevision reads the main revision of a key of the key bucket, and
// whether it marks a deletion.
func parseRevision(k []byte) (int64, bool, error) {
	if (len(k) != revisionLen && len(k) != tombstoneLen) || k[8] != '_' || (len(k) == tombstoneLen && k[17] != 't') {
		return 0, false, fmt.Errorf("its key bucket holds %x, which is not a revision", k)
	}
	main, sub := binary.BigEndian.Uint64(k[:8]), binary.BigEndian.Uint64(k[9:17])
	if main > math.MaxInt64 || sub > math.MaxInt64 {
		return 0, false, fmt.Errorf("its key bucket holds a negative revision %x", k)
	}
	return int64(main), len(k) == tombstoneLen, nil
}

// ListSnapshots lists kubeboot's snapshots in dir (the files SnapshotName
// names), newest first, each verified; other files are left out. A
// missing dir holds none. It ends with ctx's error when ctx does.
func ListSnapshots(ctx context.Context, dir string) ([]SnapshotEntry, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var list []SnapshotEntry
	for _, e := range entries {
		t, ok := SnapshotTime(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		info, err := VerifySnapshot(ctx, path)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("list snapshots: %w", ctx.Err())
		}
		entry := SnapshotEntry{Name: e.Name(), SnapshotInfo: info, Verified: err == nil, Unverifiable: errors.Is(err, ErrUnverifiable)}
		if err != nil {
			entry.Problem = err.Error()
			entry.SnapshotInfo = SnapshotInfo{Path: path}
			if st, statErr := e.Info(); statErr == nil {
				entry.Size = st.Size()
			}
		}
		entry.Time = t
		list = append(list, entry)
	}
	slices.SortFunc(list, func(a, b SnapshotEntry) int { return b.Time.Compare(a.Time) })
	return list, nil
}

// SnapshotsToPrune picks, from list (newest first, as ListSnapshots
// returns it), the snapshots that a prune keeping keep removes: all but
// the newest keep that verify, and never one that could not be verified.
// A corrupt snapshot is never one of those kept, so a run of corrupt
// snapshots cannot push out the last good ones; and one whose check could
// not run (its lock held, say) is neither counted nor removed.
func SnapshotsToPrune(list []SnapshotEntry, keep int) []SnapshotEntry {
	var remove []SnapshotEntry
	kept := 0
	for _, e := range list {
		if e.Unverifiable {
			continue
		}
		if e.Verified && kept < keep {
			kept++
			continue
		}
		remove = append(remove, e)
	}
	return remove
}
