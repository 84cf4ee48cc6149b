package etcd

import (
	"context"
	"fmt"
	"io"
)

// Snapshot takes a consistent snapshot of the member at endpoint through
// the client API (Maintenance.Snapshot), which is what `etcdctl snapshot
// save` does; copying the data dir of a running member would not be
// consistent. The snapshot is returned in memory for the caller to write:
// control-plane databases are small, and the caller's writer is atomic.
func Snapshot(ctx context.Context, endpoint string, files TLSFiles) ([]byte, error) {
	cli, err := New(ctx, []string{endpoint}, files)
	if err != nil {
		return nil, fmt.Errorf("snapshot etcd: %w", err)
	}
	defer func() { _ = cli.Close() }()
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("snapshot etcd at %q: %w", endpoint, err)
	}
	defer func() { _ = rc.Close() }()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("snapshot etcd at %q: %w", endpoint, err)
	}
	return data, nil
}
