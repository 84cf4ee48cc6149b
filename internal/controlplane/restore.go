package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
)

// The stages of a restore, in order, as its journal records them: a
// re-run after a crash resumes from the stage the journal names.
const (
	// restoreStarted: the snapshot verified; nothing changed yet.
	restoreStarted = "started"
	// restoreStopped: the static pods' manifests are in the backups dir,
	// out of the manifest dir, and the control plane has stopped.
	restoreStopped = "stopped"
	// restoreWritten: the new data dir is complete beside the old one.
	restoreWritten = "written"
	// restoreSwapped: the new data dir is the etcd data dir; the old one
	// is kept beside it until the control plane is healthy.
	restoreSwapped = "swapped"
)

// restoreJournal is what a restore records before each step, so that a
// crash anywhere leaves the old data dir or a complete new one, and a
// re-run converges.
type restoreJournal struct {
	// Snapshot is the snapshot file being restored.
	Snapshot string `json:"snapshot"`
	// Stage is the last stage reached.
	Stage string `json:"stage"`
	// Time is when the restore began, for people.
	Time time.Time `json:"time"`
}

// EtcdRestore is `kubeboot etcd restore --snapshot FILE`: it brings this
// control-plane node's cluster back from a snapshot, as a new one-member
// etcd cluster, and waits until the control plane is healthy. See
// restoreEtcd; force restores even while other members answer.
func EtcdRestore(snapshot string, force bool) workflow.Operation[*phases.Node] {
	return workflow.Operation[*phases.Node]{Name: "etcd-restore", Run: func(ctx context.Context, s *phases.Node) error {
		if !force {
			if err := checkOthersStopped(ctx, s); err != nil {
				return err
			}
		}
		return restoreEtcd(ctx, s, snapshot)
	}}
}

// checkOthersStopped refuses a restore while another member of the node's
// etcd cluster answers: the restored member founds a new cluster of one,
// and the others would go on serving the old data to whoever reaches their
// API servers. It asks this node's member, and the members its membership
// names, for the member list; when none answers, none runs.
func checkOthersStopped(ctx context.Context, s *phases.Node) error {
	c := s.Config
	if c.Etcd.Local == nil {
		return nil
	}
	if j, err := readRestoreJournal(s); err != nil || j != nil {
		return err // a restore under way stopped this node's member itself
	}
	endpoints := append([]string{etcd.ClientURL(c)}, etcd.ClientURLsOf(s.Membership.InitialCluster)...)
	cli, err := etcd.New(ctx, endpoints, etcd.LocalTLS(c, s.Files.HostPath))
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	list, err := etcd.ListMembers(ctx, cli)
	if err != nil {
		s.Report.Infof("no etcd member answers (%v): none serves the old data", err)
		return nil
	}
	if others := etcd.Answering(list, c.Node.Name); len(others) > 0 {
		return &exit.UsageError{Msg: fmt.Sprintf("etcd members %s still answer: the restore makes this node's member a new cluster of one, and they would go on serving the old data; "+
			"stop their control planes first (`kubeboot reset --force` on their nodes, which rejoin afterwards), or pass --force", strings.Join(others, ", "))}
	}
	return nil
}

// restoreEtcd verifies the snapshot and refuses a corrupt one before
// anything changes. It then stops the control plane (its manifests move to
// the backups dir), restores the snapshot into a new data dir beside the
// old one (etcd.Restore: a new cluster ID, and the revision moved on),
// swaps the two by renames, puts the manifests back and waits until every
// component is healthy; only then does the old data dir go. A journal
// names the stage reached before each step, so that a run killed at any
// point leaves the old data dir or the complete new one, and a re-run with
// the same snapshot finishes the restore.
func restoreEtcd(ctx context.Context, s *phases.Node, snapshot string) error {
	c := s.Config
	if c.Etcd.Local == nil {
		return &exit.UsageError{Msg: "etcd restore restores this node's local etcd member, and etcd.external names an etcd of its own: restore that one with its own tools"}
	}
	if _, err := s.Files.ReadFile(journalPath(c)); err == nil {
		return fmt.Errorf("an upgrade was interrupted (%s): run `kubeboot upgrade apply` again to finish it before a restore", journalPath(c))
	}
	j, err := readRestoreJournal(s)
	if err != nil {
		return err
	}
	if j != nil && j.Snapshot != snapshot {
		return &exit.UsageError{Msg: fmt.Sprintf("a restore of %s was interrupted at stage %q (%s): run `kubeboot etcd restore --snapshot %s` again to finish it first",
			j.Snapshot, j.Stage, phases.RestoreJournalPath(c), j.Snapshot)}
	}
	info, err := etcd.VerifySnapshot(ctx, snapshot)
	if err != nil {
		return &exit.UsageError{Msg: fmt.Sprintf("%v: refused; nothing was changed", err)}
	}
	s.Report.Infof("snapshot %s verifies: revision %d, %d keys, %d bytes", snapshot, info.Revision, info.Keys, info.Size)
	if j == nil {
		if err := checkRestorable(s); err != nil {
			return err
		}
		if _, err := os.Lstat(s.Files.HostPath(c.EtcdBeforeRestoreDir())); err == nil {
			return &exit.UsageError{Msg: fmt.Sprintf("%s is there, the data an earlier restore replaced: move it away or remove it, then restore again", c.EtcdBeforeRestoreDir())}
		}
		if _, err := os.Lstat(s.Files.HostPath(c.EtcdRestoringDir())); err == nil {
			return &exit.UsageError{Msg: fmt.Sprintf("%s is there, and a restore writes the new data dir there: move it away, then restore again", c.EtcdRestoringDir())}
		}
		j = &restoreJournal{Snapshot: snapshot, Stage: restoreStarted, Time: time.Now().UTC()}
		if err := writeRestoreJournal(s, j); err != nil {
			return err
		}
	} else {
		s.Report.Infof("resuming the restore begun at %s, from stage %q", j.Time.Format(time.RFC3339), j.Stage)
	}
	steps := []struct {
		from string
		run  func(context.Context, *phases.Node, string) error
		to   string
	}{
		{restoreStarted, stopControlPlane, restoreStopped},
		{restoreStopped, writeRestoredData, restoreWritten},
		{restoreWritten, swapDataDirs, restoreSwapped},
	}
	for _, step := range steps {
		if j.Stage != step.from {
			continue
		}
		if err := step.run(ctx, s, snapshot); err != nil {
			return err
		}
		j.Stage = step.to
		if err := writeRestoreJournal(s, j); err != nil {
			return err
		}
	}
	return startRestored(ctx, s, snapshot)
}

// checkRestorable refuses, before anything changes, an etcd whose data a
// restore cannot swap by renames: a WAL kept elsewhere (--wal-dir), or a
// data dir that is a symlink or a mount point, which a rename would move
// or refuse to move.
func checkRestorable(s *phases.Node) error {
	local := s.Config.Etcd.Local
	if slices.ContainsFunc(local.ExtraArgs, func(a config.Arg) bool { return a.Name == "wal-dir" && !a.Remove }) {
		return &exit.UsageError{Msg: "etcd.local.extraArgs sets wal-dir: kubeboot restores a data dir that holds its WAL; restore with etcdutl, or drop wal-dir"}
	}
	// The path itself, not what a symlink there points to.
	host := filepath.Join(s.Files.HostPath(filepath.Dir(local.DataDir)), filepath.Base(local.DataDir))
	info, err := os.Lstat(host)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect etcd data dir %q: %w", local.DataDir, err)
	}
	parent, err := os.Stat(filepath.Dir(host))
	if err != nil {
		return fmt.Errorf("inspect the parent of etcd data dir %q: %w", local.DataDir, err)
	}
	st, ok1 := info.Sys().(*syscall.Stat_t)
	pst, ok2 := parent.Sys().(*syscall.Stat_t)
	if info.Mode()&fs.ModeSymlink != 0 || ok1 && ok2 && st.Dev != pst.Dev {
		return &exit.UsageError{Msg: fmt.Sprintf("etcd.local.dataDir %s is a symlink or a mount point: a restore swaps the data dir by renames beside it; point etcd.local.dataDir at a directory inside the mount", local.DataDir)}
	}
	return checkOnlyEtcdData(s, local.DataDir)
}

// checkOnlyEtcdData refuses a data dir (a node path) that holds anything
// etcd did not write (foreignInEtcdData, as reset knows it): a restore
// moves the data dir aside and removes it once the restored control plane
// is healthy, which must not take a user's file with it. A missing dir
// holds nothing.
func checkOnlyEtcdData(s *phases.Node, dir string) error {
	foreign, err := foreignInEtcdData(s.Files.HostPath(dir))
	if err != nil {
		return fmt.Errorf("inspect etcd data dir %q: %w", dir, err)
	}
	if foreign != "" {
		return notOnlyEtcdData(dir, foreign)
	}
	return nil
}

// notOnlyEtcdData is checkOnlyEtcdData's refusal, naming what is in the way.
func notOnlyEtcdData(dir, name string) error {
	return &exit.UsageError{Msg: fmt.Sprintf("%s holds %s, which etcd did not write: a restore moves the data dir aside and then removes it, "+
		"so move %s out of it, then restore again", dir, name, filepath.Join(dir, name))}
}

// stopControlPlane moves every static pod's manifest out of the manifest
// dir into the backups dir, etcd's last, and waits until the kubelet has
// stopped them. A manifest already moved (by a run a crash ended) stays
// where it is.
func stopControlPlane(ctx context.Context, s *phases.Node, _ string) error {
	c := s.Config
	listeners, err := phases.PlannedListeners(s)
	if err != nil {
		return err
	}
	st := stoppingNow(s, listeners)
	if err := s.Files.MkdirAll(phases.BackupsDir(c), phases.ManifestDirMode); err != nil {
		return err
	}
	for _, name := range slices.Backward(config.StaticPodNames) {
		data, err := s.Files.ReadFile(c.ManifestPath(name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read manifest %q: %w", c.ManifestPath(name), err)
		}
		if _, err := backupManifest(s, name, data); err != nil {
			return err
		}
		if err := s.Files.Remove(c.ManifestPath(name)); err != nil {
			return err
		}
	}
	s.Report.Infof("the static pods' manifests are in %s until the restore is done; waiting for the kubelet to stop them", phases.BackupsDir(c))
	return waitStopped(ctx, s.Run, st, c.Timeouts.ControlPlane.Duration)
}

// writeRestoredData restores the snapshot into EtcdRestoringDir, after
// removing what an interrupted attempt left there.
func writeRestoredData(ctx context.Context, s *phases.Node, snapshot string) error {
	c := s.Config
	dir := c.EtcdRestoringDir()
	if err := s.Files.RemoveAll(dir); err != nil {
		return err
	}
	if err := etcd.Restore(ctx, snapshot, s.Files.HostPath(dir), c.Node.Name, etcd.PeerURL(c)); err != nil {
		return err
	}
	s.Report.Infof("restored the snapshot into %s: a new one-member cluster of %s", dir, c.Node.Name)
	return nil
}

// swapDataDirs makes the restored data the etcd data dir: the old one,
// checked again to hold only etcd's data, moves to EtcdBeforeRestoreDir, then
// the new one into its place, each by an atomic rename. A run a crash
// ended between the two renames finds the first done, and one it ended
// after both finds the swap done.
func swapDataDirs(_ context.Context, s *phases.Node, _ string) error {
	c := s.Config
	data, before := c.Etcd.Local.DataDir, c.EtcdBeforeRestoreDir()
	_, restoringErr := os.Lstat(s.Files.HostPath(c.EtcdRestoringDir()))
	_, dataErr := os.Lstat(s.Files.HostPath(data))
	if errors.Is(restoringErr, fs.ErrNotExist) && dataErr == nil {
		// A run a crash ended after the second rename: the swap is done.
		return phases.EnsureEtcdDataDir(s)
	}
	if dataErr == nil {
		if err := checkOnlyEtcdData(s, data); err != nil {
			return err
		}
		if err := s.Files.Rename(data, before); err != nil {
			return err
		}
		s.Report.Infof("the data before the restore is in %s until the control plane is healthy", before)
	}
	if err := s.Files.Rename(c.EtcdRestoringDir(), data); err != nil {
		return err
	}
	return phases.EnsureEtcdDataDir(s)
}

// startRestored puts the manifests back, etcd's first, waits until every
// component is healthy, and then removes the old data dir (unless
// something etcd did not write came into it meanwhile: then it stays, and
// the report says so), the backups and the journal of the restore of
// snapshot.
func startRestored(ctx context.Context, s *phases.Node, snapshot string) error {
	c := s.Config
	for _, name := range config.StaticPodNames {
		backup := filepath.Join(phases.BackupsDir(c), name+".yaml")
		data, err := s.Files.ReadFile(backup)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read the manifest's copy %q: %w", backup, err)
		}
		if err := s.Files.WriteFile(c.ManifestPath(name), data, phases.ManifestMode); err != nil {
			return err
		}
	}
	if _, err := (workflow.Runner[*phases.Node]{Phases: []workflow.Phase[*phases.Node]{phases.Wait}}).Run(ctx, s, nil); err != nil {
		return fmt.Errorf("%w\nthe data before the restore is in %s; `kubeboot etcd restore --snapshot %s` again resumes", err, c.EtcdBeforeRestoreDir(), snapshot)
	}
	s.Report.SetPhase("etcd-restore")
	for _, name := range config.StaticPodNames {
		if err := s.Files.Remove(filepath.Join(phases.BackupsDir(c), name+".yaml")); err != nil {
			return err
		}
	}
	if err := checkOnlyEtcdData(s, c.EtcdBeforeRestoreDir()); err != nil {
		s.Report.Warnf("left %s, the data before the restore: %v", c.EtcdBeforeRestoreDir(), err)
	} else if err := s.Files.RemoveAll(c.EtcdBeforeRestoreDir()); err != nil {
		return err
	}
	if err := s.Files.Remove(phases.RestoreJournalPath(c)); err != nil {
		return err
	}
	s.Report.Infof("the control plane runs on the restored data: etcd is a new one-member cluster; other control-plane nodes rejoin by themselves at their next bootstrap (their boot) or `kubeboot join --control-plane`, and workers keep running")
	return nil
}

// readRestoreJournal reads the journal of an interrupted restore; nil when
// there is none.
func readRestoreJournal(s *phases.Node) (*restoreJournal, error) {
	path := phases.RestoreJournalPath(s.Config)
	data, err := s.Files.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read restore journal %q: %w", path, err)
	}
	var j restoreJournal
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("read restore journal %q: not a journal kubeboot wrote: remove it only if no restore is under way: %w", path, err)
	}
	if j.Snapshot == "" || !slices.Contains([]string{restoreStarted, restoreStopped, restoreWritten, restoreSwapped}, j.Stage) {
		return nil, fmt.Errorf("read restore journal %q: it names no snapshot or an unknown stage %q: remove it only if no restore is under way", path, j.Stage)
	}
	return &j, nil
}

// writeRestoreJournal records j atomically.
func writeRestoreJournal(s *phases.Node, j *restoreJournal) error {
	data, err := json.Marshal(j)
	if err != nil {
		return err
	}
	if err := s.Files.MkdirAll(phases.BackupsDir(s.Config), phases.ManifestDirMode); err != nil {
		return err
	}
	return s.Files.WriteFile(phases.RestoreJournalPath(s.Config), data, 0o600)
}
