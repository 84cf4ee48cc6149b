package snapshot

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
)

// SaveOptions are what Save takes beside the node.
type SaveOptions struct {
	// Out is the snapshot file, replaced only by a snapshot that
	// verifies; empty for a new file named for the time in the node's
	// snapshot dir (etcd.local.snapshotsDir).
	Out string
	// Endpoint is the client URL of the member; empty for this node's.
	Endpoint string
}

// Save is `kubeboot etcd snapshot save`: a consistent snapshot of the
// member, written atomically and kept only once it verifies, which the
// node's Snapshot holds for the run's result.
func Save(opts SaveOptions) workflow.Operation[*phases.Node] {
	return workflow.Operation[*phases.Node]{Name: "etcd-snapshot-save", Run: func(ctx context.Context, s *phases.Node) error {
		return save(ctx, s, opts)
	}}
}

// SaveResult is the result of `etcd snapshot save`: a Result, and the
// snapshot saved.
type SaveResult struct {
	workflow.Result
	// Snapshot is the etcd snapshot the run saved: its path, size,
	// revision, keys and time.
	Snapshot *etcd.SnapshotInfo `json:"snapshot,omitempty"`
}

// SaveResultOf is the save result of the run on s, r its common part.
func SaveResultOf(s *phases.Node, r workflow.Result) SaveResult {
	return SaveResult{Result: s.Result(r), Snapshot: s.Snapshot}
}

// save is the save operation: the snapshot, and the result's account of it.
func save(ctx context.Context, s *phases.Node, opts SaveOptions) error {
	at := time.Now().UTC()
	path := opts.Out
	if path == "" {
		dir := s.Config.Etcd.Local.SnapshotsDir
		if err := s.Files.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		path = s.Files.HostPath(filepath.Join(dir, etcd.SnapshotName(at)))
	}
	endpoint := opts.Endpoint
	if endpoint == "" {
		endpoint = etcd.ClientURL(s.Config)
	}
	s.Report.Infof("saving a snapshot of etcd at %s to %s", endpoint, path)
	info, err := etcd.SaveSnapshot(ctx, endpoint, etcd.LocalTLS(s.Config, s.Files.HostPath), path)
	if err != nil {
		return err
	}
	if opts.Out == "" {
		info.Time = at // the time in its name
	}
	s.Snapshot = &info
	s.Report.Infof("saved and verified %s: %d bytes, revision %d, %d keys", info.Path, info.Size, info.Revision, info.Keys)
	return nil
}

// Prune is `kubeboot etcd snapshot prune`: it keeps the newest keep (at
// least 1) of the snapshots in the node's snapshot dir that verify, and
// those that could not be verified, which it names, and removes
// kubeboot's others; a file kubeboot did not name is never touched.
func Prune(keep int) workflow.Operation[*phases.Node] {
	return workflow.Operation[*phases.Node]{Name: "etcd-snapshot-prune", Run: func(ctx context.Context, s *phases.Node) error {
		if keep < 1 {
			return &exit.UsageError{Msg: fmt.Sprintf("keep %d: keep at least 1 snapshot", keep)}
		}
		return prune(ctx, s, keep)
	}}
}

// prune is the prune operation. A snapshot that could not be verified is
// kept, and said so.
func prune(ctx context.Context, s *phases.Node, keep int) error {
	dir := s.Config.Etcd.Local.SnapshotsDir
	list, err := etcd.ListSnapshots(ctx, s.Files.HostPath(dir))
	if err != nil {
		return err
	}
	for _, e := range list {
		if e.Unverifiable {
			s.Report.Warnf("kept %s: %s", e.Name, e.Problem)
		}
	}
	remove := etcd.SnapshotsToPrune(list, keep)
	for _, e := range remove {
		if err := s.Files.Remove(filepath.Join(dir, e.Name)); err != nil {
			return err
		}
		why := ""
		if !e.Verified {
			why = " (it does not verify: " + e.Problem + ")"
		}
		s.Report.Infof("removed %s%s", e.Name, why)
	}
	s.Report.Infof("kept %d of %d snapshots in %s", len(list)-len(remove), len(list), dir)
	return nil
}
