package health

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// alertWait is how long connect waits for a TLS alert after the handshake.
// Under TLS 1.3 a server rejects a client certificate only after the
// client considers the handshake done, and the alert follows at once.
const alertWait = 200 * time.Millisecond

// etcdCheck checks every member endpoint the way `etcdctl endpoint health`
// defines health: a read succeeds (or is merely denied) and no NOSPACE or
// CORRUPT alarm is raised.
type etcdCheck struct {
	endpoints []string
	tls       *tls.Config
	files     tlsFiles
}

// check checks all members concurrently; every member must be healthy.
func (c *etcdCheck) check(ctx context.Context) error {
	errs := make([]error, len(c.endpoints))
	var wg sync.WaitGroup
	for i, ep := range c.endpoints {
		wg.Go(func() { errs[i] = c.member(ctx, ep) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// member checks one endpoint with a fresh client. A client kept across
// polls would wait out gRPC's reconnect backoff, which grows to minutes,
// and so notice late that a member came up.
func (c *etcdCheck) member(ctx context.Context, endpoint string) error {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		TLS:         c.tls,
		DialTimeout: dialTimeout,
		Context:     ctx,
		Logger:      zap.NewNop(),
		// One retry keeps a refused connection from being retried until
		// the check's deadline.
		MaxUnaryRetries: 1,
		DialOptions:     []grpc.DialOption{grpc.WithChainUnaryInterceptor(failFast)},
	})
	if err != nil {
		return c.fail(ctx, endpoint, err)
	}
	defer func() { _ = cli.Close() }()

	// Without a leader the member answers at once instead of waiting.
	_, err = cli.Get(clientv3.WithRequireLeader(ctx), "health")
	if err != nil && !errors.Is(err, rpctypes.ErrPermissionDenied) {
		return c.fail(ctx, endpoint, err)
	}
	resp, err := cli.AlarmList(ctx)
	if err != nil {
		return c.fail(ctx, endpoint, err)
	}
	var alarms []string
	for _, a := range resp.Alarms {
		if a.Alarm == pb.AlarmType_NOSPACE || a.Alarm == pb.AlarmType_CORRUPT {
			alarms = append(alarms, fmt.Sprintf("%s on member %x", a.Alarm, a.MemberID))
		}
	}
	if len(alarms) > 0 {
		e := newProbeError(ReasonAlarm, endpoint, c.files, nil)
		e.Alarms = alarms
		e.Detail = "alarm raised: " + strings.Join(alarms, ", ")
		return e
	}
	return nil
}

// failFast makes a call fail as soon as the member turns out unreachable.
// clientv3 asks gRPC to wait for a connection instead, which would turn
// every refused connection or TLS error into a timeout at the check's
// deadline. A later call option overrides an earlier one.
func failFast(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(ctx, method, req, reply, cc, append(opts, grpc.WaitForReady(false))...)
}

// fail classifies an etcd client error. gRPC reports transport failures as
// status messages without the typed errors underneath, so a failure that
// is not an answer from etcd is retried with a plain TLS connection, whose
// errors name the cause.
func (c *etcdCheck) fail(ctx context.Context, endpoint string, err error) error {
	if errors.Is(err, rpctypes.ErrNoLeader) {
		e := newProbeError(ReasonNoLeader, endpoint, c.files, err)
		e.Detail = "the member has no leader"
		return e
	}
	if cause := c.connect(ctx, endpoint); cause != nil {
		return classify(endpoint, cause, c.files)
	}
	if isTimeout(err) {
		e := newProbeError(ReasonTimeout, endpoint, c.files, err)
		e.Detail = "no answer in time"
		return e
	}
	e := newProbeError(ReasonUnhealthy, endpoint, c.files, err)
	e.Detail = err.Error()
	return e
}

// connect opens a TCP connection to the endpoint and, for https, completes
// a TLS handshake with the check's configuration, returning the first
// error, or nil when the connection works.
func (c *etcdCheck) connect(ctx context.Context, endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		return fmt.Errorf("parse etcd endpoint %q: %w", endpoint, err)
	}
	conn, err := (&net.Dialer{Timeout: dialTimeout}).DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	if u.Scheme != "https" {
		return nil
	}
	cfg := c.tls.Clone()
	cfg.ServerName = u.Hostname()
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return err
	}
	_ = tc.SetReadDeadline(time.Now().Add(alertWait))
	var op *net.OpError
	if _, err := tc.Read(make([]byte, 1)); errors.As(err, &op) && op.Op == "remote error" {
		return err
	}
	return nil
}
