package health

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/kubeboot/kubeboot/internal/etcd"
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

// member checks one endpoint and classifies a failure for diagnosis.
func (c *etcdCheck) member(ctx context.Context, endpoint string) error {
	err := etcd.CheckHealth(ctx, endpoint, c.tls)
	var alarm *etcd.AlarmError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &alarm):
		e := newProbeError(ReasonAlarm, endpoint, c.files, nil)
		e.Alarms = alarm.Alarms
		e.Detail = alarm.Error()
		return e
	}
	return c.fail(ctx, endpoint, err)
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
