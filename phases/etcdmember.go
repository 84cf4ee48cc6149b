package phases

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kubeboot/kubeboot/config"
)

// Membership changes talk to the whole cluster, so they use the API
// server's etcd client certificate, which every member accepts.
const (
	etcdDialTimeout    = 5 * time.Second
	etcdRequestTimeout = 10 * time.Second
	// promoteInterval is the pause between promotion attempts while a
	// learner catches up with the leader's log.
	promoteInterval = time.Second
	// reconfigTimeout bounds the retries of a membership change etcd
	// calls unsafe for now.
	reconfigTimeout = 30 * time.Second
)

// EtcdPeerURL is the peer URL this node's stacked member advertises.
func EtcdPeerURL(c *config.ClusterConfiguration) string {
	return "https://" + net.JoinHostPort(c.Node.AdvertiseAddress, strconv.Itoa(config.PortEtcdPeer))
}

// EtcdClientURL is the client URL this node's stacked member advertises.
func EtcdClientURL(c *config.ClusterConfiguration) string {
	return "https://" + net.JoinHostPort(c.Node.AdvertiseAddress, strconv.Itoa(config.PortEtcdClient))
}

// newEtcdClient connects to endpoints with the API server's etcd client
// certificate and the etcd CA of this node.
func newEtcdClient(ctx context.Context, s *State, endpoints []string) (*clientv3.Client, error) {
	c := s.Config
	info := transport.TLSInfo{
		CertFile:      s.Files.HostPath(c.CertPath(config.CertAPIServerEtcdClient)),
		KeyFile:       s.Files.HostPath(c.KeyPath(config.CertAPIServerEtcdClient)),
		TrustedCAFile: s.Files.HostPath(c.CertPath(config.CertEtcdCA)),
	}
	tlsConfig, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load etcd client certificate %q: %w", info.CertFile, err)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         tlsConfig,
		DialTimeout: etcdDialTimeout,
		Context:     ctx,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("connect to etcd %q: %w", strings.Join(endpoints, ","), err)
	}
	return cli, nil
}

// findMember returns the member called name, or, for a learner that has
// not started yet and so has no name, the one with peerURL.
func findMember(members []*pb.Member, name, peerURL string) *pb.Member {
	for _, m := range members {
		if (m.Name != "" && m.Name == name) || slices.Contains(m.PeerURLs, peerURL) {
			return m
		}
	}
	return nil
}

// addLearner adds the member name at peerURL as a learner, unless it is a
// member already (a join that crashed halfway resumes here), and returns
// its ID and the members including it. Each attempt lists the members
// first, so a retry after an add that did succeed does not add twice.
func addLearner(ctx context.Context, cli *clientv3.Client, name, peerURL string) (id uint64, members []*pb.Member, err error) {
	err = retryReconfig(ctx, func(ctx context.Context) error {
		list, err := cli.MemberList(ctx)
		if err != nil {
			return err
		}
		if m := findMember(list.Members, name, peerURL); m != nil {
			if !slices.Contains(m.PeerURLs, peerURL) {
				return fmt.Errorf("a member of that name exists with peer URLs %v, not %s: remove it first", m.PeerURLs, peerURL)
			}
			id, members = m.ID, list.Members
			return nil
		}
		resp, err := cli.MemberAddAsLearner(ctx, []string{peerURL})
		if err != nil {
			return err
		}
		id, members = resp.Member.ID, resp.Members
		return nil
	})
	if err != nil {
		return 0, nil, fmt.Errorf("add etcd learner %s at %q: %w", name, peerURL, err)
	}
	return id, members, nil
}

// initialCluster is etcd's --initial-cluster for a member joining members:
// every member's name=peerURL, this one included under its own name.
func initialCluster(members []*pb.Member, self uint64, name string) string {
	var parts []string
	for _, m := range members {
		n := m.Name
		if m.ID == self {
			n = name
		}
		if n == "" {
			// Another learner that never started: it cannot be named, and
			// etcd only needs the members it will talk to.
			continue
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// promoteLearner promotes member id to a voter, retrying while it catches
// up with the leader, until timeout. A member that votes already is done.
func promoteLearner(ctx context.Context, cli *clientv3.Client, id uint64, timeout time.Duration, report *Reporter) error {
	deadline := time.Now().Add(timeout)
	for attempt := 1; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, etcdRequestTimeout)
		_, err := cli.MemberPromote(rctx, id)
		cancel()
		switch {
		case err == nil, isEtcdError(err, rpctypes.ErrMemberNotLearner):
			return nil
		case !isEtcdError(err, rpctypes.ErrMemberLearnerNotReady) && !isUnavailable(err):
			return fmt.Errorf("promote etcd learner %x: %w", id, err)
		case time.Now().After(deadline):
			return &TimeoutError{Msg: fmt.Sprintf("promote etcd learner %x: still not in sync with the leader after %s (%d attempts): %v", id, timeout, attempt, err)}
		}
		if attempt == 1 || attempt%10 == 0 {
			report.Infof("etcd learner %x is catching up with the leader (attempt %d)", id, attempt)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("promote etcd learner %x: %w", id, ctx.Err())
		case <-time.After(promoteInterval):
		}
	}
}

// removeMember removes member id from the cluster.
func removeMember(ctx context.Context, cli *clientv3.Client, id uint64) error {
	err := retryReconfig(ctx, func(ctx context.Context) error {
		_, err := cli.MemberRemove(ctx, id)
		if isEtcdError(err, rpctypes.ErrMemberNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("remove etcd member %x: %w", id, err)
	}
	return nil
}

// retryReconfig runs a membership change, retrying while etcd refuses it
// as unsafe for now: "unhealthy cluster" until every member has been
// connected for a few seconds, as right after a join, or no leader during
// an election. Other errors, and the last one after reconfigTimeout, are
// returned.
func retryReconfig(ctx context.Context, op func(context.Context) error) error {
	deadline := time.Now().Add(reconfigTimeout)
	for {
		rctx, cancel := context.WithTimeout(ctx, etcdRequestTimeout)
		err := op(rctx)
		cancel()
		if err == nil || (!isEtcdError(err, rpctypes.ErrUnhealthy) && !isUnavailable(err)) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(promoteInterval):
		}
	}
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
