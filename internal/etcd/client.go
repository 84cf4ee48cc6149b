// Package etcd is kubeboot's one etcd client: it connects with TLS, checks a
// member's health, takes snapshots, and changes membership (add a learner,
// promote it, remove a member, leave a cluster). It prints nothing: progress
// goes to a Reporter the caller passes.
package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/inputfile"
	"github.com/kubeboot/kubeboot/pki"
)

const (
	// dialTimeout bounds one connection attempt, so that a member that is
	// down fails fast instead of using up a whole check.
	dialTimeout = time.Second
	// memberDialTimeout is more patient, for membership changes, which
	// run once and matter more than speed.
	memberDialTimeout = 5 * time.Second
	// requestTimeout bounds one membership request.
	requestTimeout = 10 * time.Second
	// statusTimeout bounds the status check of one member.
	statusTimeout = 3 * time.Second
	// retryInterval is the pause between attempts while a learner catches
	// up or a reconfiguration waits for a healthy cluster.
	retryInterval = time.Second
	// reconfigTimeout bounds the retries of one membership change.
	reconfigTimeout = 30 * time.Second
)

// Reporter receives progress, such as a learner catching up.
type Reporter interface {
	// Infof reports progress.
	Infof(format string, args ...any)
	// Warnf reports something the user should know about.
	Warnf(format string, args ...any)
}

// TLSFiles are the host paths of a client's TLS files.
type TLSFiles struct {
	// CA verifies the members' serving certificates.
	CA string
	// Cert and Key are the client certificate and its key.
	Cert, Key string
}

// Load reads the files into a client TLS configuration.
func (f TLSFiles) Load() (*tls.Config, error) {
	var pems [3][]byte
	for i, path := range []string{f.CA, f.Cert, f.Key} {
		if path == "" {
			continue
		}
		data, err := inputfile.Read(path, inputfile.PEMLimit)
		if err != nil {
			return nil, fmt.Errorf("read etcd client TLS file %q: %w", path, err)
		}
		pems[i] = data
	}
	cfg, err := pki.ClientTLS(pems[0], pems[1], pems[2])
	if err != nil {
		return nil, fmt.Errorf("load etcd client TLS (CA %q, certificate %q): %w", f.CA, f.Cert, err)
	}
	return cfg, nil
}

// LocalTLS are the files through which a control-plane node talks to its
// etcd: the API server's etcd client certificate and the etcd CA. hostPath
// maps a node path to this machine's.
func LocalTLS(c *config.ClusterConfiguration, hostPath func(string) string) TLSFiles {
	return TLSFiles{
		CA:   hostPath(c.CertPath(config.CertEtcdCA)),
		Cert: hostPath(c.CertPath(config.CertAPIServerEtcdClient)),
		Key:  hostPath(c.KeyPath(config.CertAPIServerEtcdClient)),
	}
}

// PeerURL is the peer URL this node's stacked member advertises.
func PeerURL(c *config.ClusterConfiguration) string {
	return "https://" + net.JoinHostPort(c.Node.AdvertiseAddress, strconv.Itoa(config.PortEtcdPeer))
}

// ClientURL is the client URL this node's stacked member advertises.
func ClientURL(c *config.ClusterConfiguration) string {
	return "https://" + net.JoinHostPort(c.Node.AdvertiseAddress, strconv.Itoa(config.PortEtcdClient))
}

// New connects to endpoints with the client certificate in files. Close
// the client when done.
func New(ctx context.Context, endpoints []string, files TLSFiles) (*clientv3.Client, error) {
	tlsConfig, err := files.Load()
	if err != nil {
		return nil, err
	}
	return newClient(ctx, endpoints, tlsConfig, false)
}

// newClient is the one place a client is made. A failFast client makes a
// single attempt per request and does not wait for a connection, so that a
// health check answers within its deadline.
func newClient(ctx context.Context, endpoints []string, tlsConfig *tls.Config, failFast bool) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   endpoints,
		TLS:         tlsConfig,
		DialTimeout: memberDialTimeout,
		Context:     ctx,
		Logger:      zap.NewNop(),
	}
	if failFast {
		cfg.DialTimeout = dialTimeout
		cfg.MaxUnaryRetries = 1
		cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(noWaitForReady)}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to etcd %q: %w", strings.Join(endpoints, ","), err)
	}
	return cli, nil
}

// noWaitForReady makes a request fail at once when the connection is down,
// instead of waiting for it until the deadline.
func noWaitForReady(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(ctx, method, req, reply, cc, append(opts, grpc.WaitForReady(false))...)
}

// isEtcdError compares by exact description: the client turns server
// errors into rpctypes errors, but a gRPC status may reach us unconverted.
// Exact, because one description is a prefix of another ("can only promote
// a learner member" and "... which is in sync with leader").
func isEtcdError(err, target error) bool {
	return errors.Is(err, target) || (err != nil && rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(target))
}

// isUnavailable is a transient error while the cluster changes membership.
func isUnavailable(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || isEtcdError(err, rpctypes.ErrNoLeader) ||
		isEtcdError(err, rpctypes.ErrTimeout) || isEtcdError(err, rpctypes.ErrLeaderChanged)
}
