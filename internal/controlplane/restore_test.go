package controlplane

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

// snapshotOfRealEtcd is a snapshot file of a real (embedded) etcd member
// that holds the key /registry/kept, written as etcd's snapshot API
// streams it (with its integrity hash).
func snapshotOfRealEtcd(t *testing.T) string {
	t.Helper()
	cli := startEmbeddedEtcd(t, "m1", filepath.Join(t.TempDir(), "m1"), localURL(t))
	_, err := cli.Put(t.Context(), "/registry/kept", "v1")
	must(t, err)
	return saveSnapshot(t, cli)
}

// TestRestoreRefusesACorruptSnapshot: a truncated snapshot is refused (a
// usage error) before anything on the node changes.
func TestRestoreRefusesACorruptSnapshot(t *testing.T) {
	s := initialised(t)
	withEtcdData(t, s)
	good := snapshotOfRealEtcd(t)
	data, err := os.ReadFile(good)
	must(t, err)
	bad := filepath.Join(t.TempDir(), "truncated.db")
	must(t, os.WriteFile(bad, data[:len(data)/2], 0o600))
	before := phasestest.Snapshot(t, s.Files.HostPath("/"))
	_, err = EtcdRestore(bad, true).Execute(context.Background(), s)
	if exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("restore of a truncated snapshot: %v (exit %d)", err, exit.Code(err))
	}
	if after := phasestest.Snapshot(t, s.Files.HostPath("/")); !maps.Equal(before, after) {
		t.Error("a refused restore changed files on the node")
	}
}

// TestRestoreResumesAfterACrash: a restore killed between the two renames
// of the data dirs resumes from its journal: the restored data becomes the
// data dir, the manifests come back, and the old data stays beside it as
// long as the control plane is not healthy (here, no kubelet runs it).
// A journal of another snapshot is refused.
func TestRestoreResumesAfterACrash(t *testing.T) {
	// A loopback address no test listens on: stopping the control plane
	// waits until nothing answers at its addresses.
	s := initialisedWith(t, func(c *config.ClusterConfiguration) {
		c.Node.AdvertiseAddress = "127.0.0.93"
		c.Timeouts.ControlPlane.Duration = 5 * time.Second
	})
	withEtcdData(t, s)
	s.Options.Offline = false
	c := s.Config
	snapshot := snapshotOfRealEtcd(t)
	manifests := map[string][]byte{}
	for _, name := range phases.StaticPods(c) {
		manifests[name] = phasestest.HostFile(t, s, c.ManifestPath(name))
	}

	// The run a crash ended: stopped, written, and the old data dir moved.
	j := &restoreJournal{Snapshot: snapshot, Stage: restoreStarted, Time: time.Now()}
	must(t, writeRestoreJournal(s, j))
	must(t, stopControlPlane(context.Background(), s, snapshot))
	for name := range manifests {
		if _, err := os.Stat(s.Files.HostPath(c.ManifestPath(name))); !os.IsNotExist(err) {
			t.Fatalf("%s's manifest is still in the manifest dir: %v", name, err)
		}
	}
	must(t, writeRestoredData(context.Background(), s, snapshot))
	j.Stage = restoreWritten
	must(t, writeRestoreJournal(s, j))
	must(t, s.Files.Rename(c.Etcd.Local.DataDir, c.EtcdBeforeRestoreDir()))

	other := snapshotOfRealEtcd(t)
	if _, err := EtcdRestore(other, true).Execute(context.Background(), s); exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), "was interrupted") {
		t.Fatalf("a restore of another snapshot over an interrupted one: %v", err)
	}

	// The re-run: the control plane never gets healthy without a kubelet.
	timeouts := *c
	timeouts.Timeouts.ControlPlane.Duration = time.Second
	rerun, err := phases.NewNode(s.Run, &timeouts)
	must(t, err)
	_, err = EtcdRestore(snapshot, true).Execute(context.Background(), rerun)
	if err == nil || !strings.Contains(err.Error(), c.EtcdBeforeRestoreDir()) {
		t.Fatalf("the resumed restore: %v", err)
	}
	if db, err := os.ReadFile(s.Files.HostPath(filepath.Join(c.Etcd.Local.DataDir, "member", "snap", "db"))); err != nil || string(db) == "data" {
		t.Errorf("the data dir holds no restored database: %v", err)
	}
	if db, err := os.ReadFile(s.Files.HostPath(filepath.Join(c.EtcdBeforeRestoreDir(), "member", "snap", "db"))); err != nil || string(db) != "data" {
		t.Errorf("the data before the restore is gone while the control plane is not healthy: %v", err)
	}
	if _, err := os.Stat(s.Files.HostPath(c.EtcdRestoringDir())); !os.IsNotExist(err) {
		t.Errorf("%s is still there: %v", c.EtcdRestoringDir(), err)
	}
	for name, want := range manifests {
		if got := phasestest.HostFile(t, s, c.ManifestPath(name)); string(got) != string(want) {
			t.Errorf("%s's manifest came back changed", name)
		}
	}
	if j, err := readRestoreJournal(s); err != nil || j == nil || j.Stage != restoreSwapped {
		t.Errorf("journal %+v (%v), want stage %q", j, err, restoreSwapped)
	}
}

// TestRestoreSwapDone: a restore killed after both renames, before its
// journal said so, finds the swap done on the re-run: the restored data
// stays the data dir, and the old one stays beside it.
func TestRestoreSwapDone(t *testing.T) {
	s := initialised(t)
	withEtcdData(t, s)
	c := s.Config
	snapshot := snapshotOfRealEtcd(t)
	must(t, writeRestoredData(context.Background(), s, snapshot))
	must(t, s.Files.Rename(c.Etcd.Local.DataDir, c.EtcdBeforeRestoreDir()))
	must(t, s.Files.Rename(c.EtcdRestoringDir(), c.Etcd.Local.DataDir))
	must(t, swapDataDirs(context.Background(), s, snapshot))
	if db, err := os.ReadFile(s.Files.HostPath(filepath.Join(c.Etcd.Local.DataDir, "member", "snap", "db"))); err != nil || string(db) == "data" {
		t.Errorf("the data dir no longer holds the restored data: %v", err)
	}
	if db, err := os.ReadFile(s.Files.HostPath(filepath.Join(c.EtcdBeforeRestoreDir(), "member", "snap", "db"))); err != nil || string(db) != "data" {
		t.Errorf("the data before the restore moved: %v", err)
	}
}

// TestRestoreRefusesWhatItCannotSwap: a data dir that is a symlink, and a
// WAL kept elsewhere, are refused before anything changes; and while a
// restore is under way, reset, upgrade and restarts refuse to go on.
func TestRestoreRefusesWhatItCannotSwap(t *testing.T) {
	snapshot := snapshotOfRealEtcd(t)
	s := initialisedWith(t, func(c *config.ClusterConfiguration) {
		c.Etcd.Local.ExtraArgs = []config.Arg{{Name: "wal-dir", Value: "/var/lib/etcd-wal"}}
	})
	if _, err := EtcdRestore(snapshot, true).Execute(context.Background(), s); exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), "wal-dir") {
		t.Errorf("a restore with --wal-dir: %v", err)
	}

	s = initialised(t)
	data := s.Files.HostPath(s.Config.Etcd.Local.DataDir)
	target := filepath.Join(t.TempDir(), "elsewhere")
	must(t, os.MkdirAll(target, 0o700))
	must(t, os.MkdirAll(filepath.Dir(data), 0o755))
	must(t, os.RemoveAll(data))
	must(t, os.Symlink(target, data))
	if _, err := EtcdRestore(snapshot, true).Execute(context.Background(), s); exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), "symlink or a mount point") {
		t.Errorf("a restore into a symlinked data dir: %v", err)
	}
	if _, err := os.Stat(s.Files.HostPath(s.Config.ManifestPath(config.NameEtcd))); err != nil {
		t.Errorf("a refused restore moved the etcd manifest: %v", err)
	}
	if j, err := readRestoreJournal(s); err != nil || j != nil {
		t.Errorf("a refused restore wrote a journal: %+v, %v", j, err)
	}

	s = initialised(t)
	must(t, writeRestoreJournal(s, &restoreJournal{Snapshot: snapshot, Stage: restoreStopped}))
	if _, err := resetNode(context.Background(), s, ResetOptions{Force: true}); err == nil || !strings.Contains(err.Error(), "restore of this node's etcd was interrupted") {
		t.Errorf("reset during a restore: %v", err)
	}
	if err := upgradeApply(context.Background(), s, time.Second); err == nil || !strings.Contains(err.Error(), "restore of this node's etcd was interrupted") {
		t.Errorf("upgrade apply during a restore: %v", err)
	}
}

// TestRestoreRefusesUncheckableSnapshots: a FIFO given as the snapshot is
// refused at once, not waited on; and a snapshot whose hash is right but
// whose pages are crafted (its root page a branch that points to itself,
// which sends bbolt round until memory runs out) is refused as malformed.
// Neither changes the node.
func TestRestoreRefusesUncheckableSnapshots(t *testing.T) {
	s := initialised(t)
	withEtcdData(t, s)
	fifo := filepath.Join(t.TempDir(), "snapshot.db")
	must(t, syscall.Mkfifo(fifo, 0o600))

	data, err := os.ReadFile(snapshotOfRealEtcd(t))
	must(t, err)
	db := data[:len(data)-sha256.Size]
	pageSize, root := uint64(binary.NativeEndian.Uint32(db[24:])), binary.NativeEndian.Uint64(db[32:])
	page := db[root*pageSize:]
	binary.NativeEndian.PutUint16(page[8:], 0x01)  // a branch page
	binary.NativeEndian.PutUint16(page[10:], 1)    // of one element
	binary.NativeEndian.PutUint32(page[16:], 16)   // whose key follows it
	binary.NativeEndian.PutUint32(page[20:], 1)    // and is one byte
	binary.NativeEndian.PutUint64(page[24:], root) // over this very page
	sum := sha256.Sum256(db)
	crafted := filepath.Join(t.TempDir(), "crafted.db")
	must(t, os.WriteFile(crafted, append(db, sum[:]...), 0o600))

	for path, want := range map[string]string{fifo: "not a regular file: it is a FIFO", crafted: "its database is malformed: page"} {
		before := phasestest.Snapshot(t, s.Files.HostPath("/"))
		_, err := EtcdRestore(path, true).Execute(context.Background(), s)
		if exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "nothing was changed") {
			t.Errorf("restore of %s: %v (exit %d), want it refused saying %q", path, err, exit.Code(err), want)
		}
		if after := phasestest.Snapshot(t, s.Files.HostPath("/")); !maps.Equal(before, after) {
			t.Errorf("a refused restore of %s changed files on the node", path)
		}
	}
}

// TestRestoreKeepsWhatEtcdDidNotWrite: a data dir holding a file etcd did
// not write, which the restore would move aside and later remove, is
// refused before anything changes, and so is a directory of someone's
// where the restore writes the new data; a file put into the data dir
// while the restore runs stops it before the swap.
func TestRestoreKeepsWhatEtcdDidNotWrite(t *testing.T) {
	snapshot := snapshotOfRealEtcd(t)
	s := initialised(t)
	c := s.Config
	withEtcdData(t, s)
	notes := s.Files.HostPath(filepath.Join(c.Etcd.Local.DataDir, "notes.txt"))
	must(t, os.WriteFile(notes, []byte("mine"), 0o600))
	before := phasestest.Snapshot(t, s.Files.HostPath("/"))
	_, err := EtcdRestore(snapshot, true).Execute(context.Background(), s)
	if exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), "holds notes.txt, which etcd did not write") {
		t.Errorf("restore of a data dir with a user's file: %v (exit %d)", err, exit.Code(err))
	}
	if after := phasestest.Snapshot(t, s.Files.HostPath("/")); !maps.Equal(before, after) {
		t.Error("a refused restore changed files on the node")
	}
	must(t, os.Remove(notes))

	restoring := s.Files.HostPath(c.EtcdRestoringDir())
	must(t, os.MkdirAll(restoring, 0o700))
	_, err = EtcdRestore(snapshot, true).Execute(context.Background(), s)
	if exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), "a restore writes the new data dir there") {
		t.Errorf("restore with %s there: %v (exit %d)", c.EtcdRestoringDir(), err, exit.Code(err))
	}
	must(t, os.Remove(restoring))

	must(t, writeRestoredData(context.Background(), s, snapshot))
	must(t, os.WriteFile(notes, []byte("mine"), 0o600))
	if err := swapDataDirs(context.Background(), s, snapshot); err == nil || !strings.Contains(err.Error(), "holds notes.txt") {
		t.Errorf("swap with a user's file in the data dir: %v", err)
	}
	if data, err := os.ReadFile(notes); err != nil || string(data) != "mine" {
		t.Errorf("the user's file moved: %v", err)
	}
}
