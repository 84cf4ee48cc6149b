package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// AlarmError is a member that answers but has raised an alarm that makes
// it unfit to serve: NOSPACE or CORRUPT.
type AlarmError struct {
	// Alarms are the alarms raised, like "NOSPACE on member 8e9e05c52164694d".
	Alarms []string
}

// Error lists the alarms.
func (e *AlarmError) Error() string { return "alarm raised: " + strings.Join(e.Alarms, ", ") }

// CheckHealth checks the member at endpoint as etcdctl's `endpoint health`
// does: a linearizable Get of the key "health" succeeds (permission denied
// counts as success: the member answered), and no NOSPACE or CORRUPT alarm
// is raised. It makes one attempt and returns when ctx is done. A failure
// is the client's error, or an *AlarmError.
//
// Each check makes a fresh client: a client kept across polls would wait
// out gRPC's reconnect backoff, which grows to minutes, and so notice late
// that a member came up.
func CheckHealth(ctx context.Context, endpoint string, tlsConfig *tls.Config) error {
	cli, err := newClient(ctx, []string{endpoint}, tlsConfig, true)
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	// WithRequireLeader makes a member without a leader fail at once with
	// ErrNoLeader instead of timing out.
	if _, err := cli.Get(clientv3.WithRequireLeader(ctx), "health"); err != nil && !errors.Is(err, rpctypes.ErrPermissionDenied) {
		return err
	}
	resp, err := cli.AlarmList(ctx)
	if err != nil {
		return err
	}
	var alarms []string
	for _, a := range resp.Alarms {
		if a.Alarm == pb.AlarmType_NOSPACE || a.Alarm == pb.AlarmType_CORRUPT {
			alarms = append(alarms, fmt.Sprintf("%s on member %x", a.Alarm, a.MemberID))
		}
	}
	if len(alarms) > 0 {
		return &AlarmError{Alarms: alarms}
	}
	return nil
}
