package health

import (
	"context"
	"fmt"
	"io"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EtcdSnapshot takes a consistent snapshot of the etcd member behind the
// target through the client API (Maintenance.Snapshot), which is what
// `etcdctl snapshot save` does; copying the data dir of a running member
// would not be consistent. The snapshot is returned in memory for the
// caller to write: control-plane databases are small, and the caller's
// writer is atomic.
func EtcdSnapshot(ctx context.Context, t Target, hostPath func(string) string) ([]byte, error) {
	if hostPath == nil {
		hostPath = func(p string) string { return p }
	}
	cfg, err := loadTLS(tlsFiles{ca: hostFile(t.CAFile, hostPath), cert: hostFile(t.CertFile, hostPath), key: hostFile(t.KeyFile, hostPath)})
	if err != nil {
		return nil, fmt.Errorf("snapshot etcd: %w", err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: t.Endpoints[:1], TLS: cfg, DialTimeout: dialTimeout, Context: ctx, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("snapshot etcd at %q: %w", t.Endpoints[0], err)
	}
	defer func() { _ = cli.Close() }()
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("snapshot etcd at %q: %w", t.Endpoints[0], err)
	}
	defer func() { _ = rc.Close() }()
	// The stream ends with the database's SHA-256, and the server's
	// snapshot call fails the read when it cannot send it whole.
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("snapshot etcd at %q: %w", t.Endpoints[0], err)
	}
	return data, nil
}
