package etcd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// RestoreRevisionBump is how far a restore moves the revision past the
// snapshot's, with that revision marked compacted, as etcd's guide for
// restoring a Kubernetes cluster asks: the API servers' and controllers'
// watches, which remember newer revisions than the snapshot's, must see
// the store move on rather than back, and relist.
const RestoreRevisionBump = 1_000_000_000

// Restore writes the data dir of a new one-member cluster from the snapshot
// file at path, as etcdutl snapshot restore does: the member called name,
// reached at peerURL, with a new cluster ID. dataDir (a host path) must
// not exist: a restore never writes over a data dir. The caller verifies
// the snapshot first (VerifySnapshot), so that bbolt, which etcdutl opens
// it with, reads only a database whose pages check; etcdutl checks its
// integrity hash again as it copies it.
//
// When ctx ends first, Restore returns at once with ctx's error, and the
// restore goes on writing dataDir until the process exits: the caller
// exits, and a new attempt starts from an empty dataDir.
func Restore(ctx context.Context, path, dataDir, name, peerURL string) error {
	if _, err := os.Lstat(dataDir); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("restore into %s: it exists, and a restore writes only a new data dir", dataDir)
	}
	done := make(chan error, 1)
	go func() {
		done <- snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
			SnapshotPath:        path,
			Name:                name,
			OutputDataDir:       dataDir,
			PeerURLs:            []string{peerURL},
			InitialCluster:      name + "=" + peerURL,
			InitialClusterToken: fmt.Sprintf("kubeboot-restore-%d", time.Now().UnixNano()),
			RevisionBump:        RestoreRevisionBump,
			MarkCompacted:       true,
		})
	}()
	select {
	case <-ctx.Done():
		return fmt.Errorf("restore snapshot %s into %s: %w", path, dataDir, ctx.Err())
	case err := <-done:
		if err != nil {
			return fmt.Errorf("restore snapshot %s into %s: %w", path, dataDir, err)
		}
		return nil
	}
}
