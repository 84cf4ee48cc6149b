package etcd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubeboot/kubeboot/internal/exit"
)

// Membership changes talk to the whole cluster, so callers connect with the
// API server's etcd client certificate, which every member accepts.

// FindMember returns the member called name, or, for a learner that has
// not started yet and so has no name, the one with peerURL.
func FindMember(members []*pb.Member, name, peerURL string) *pb.Member {
	for _, m := range members {
		if (m.Name != "" && m.Name == name) || slices.Contains(m.PeerURLs, peerURL) {
			return m
		}
	}
	return nil
}

// IsLearner says whether member id is a learner among members.
func IsLearner(members []*pb.Member, id uint64) bool {
	for _, m := range members {
		if m.ID == id {
			return m.IsLearner
		}
	}
	return false
}

// AddLearner adds the member name at peerURL as a learner, unless it is a
// member already (a join that crashed halfway resumes here), and returns
// its ID and the members including it. Each attempt lists the members
// first, so a retry after an add that did succeed does not add twice.
func AddLearner(ctx context.Context, cli *clientv3.Client, name, peerURL string) (id uint64, members []*pb.Member, err error) {
	err = retryReconfig(ctx, func(ctx context.Context) error {
		list, err := cli.MemberList(ctx)
		if err != nil {
			return err
		}
		if m := FindMember(list.Members, name, peerURL); m != nil {
			if !slices.Contains(m.PeerURLs, peerURL) {
				return fmt.Errorf("a member of that name exists with peer URLs %v, not %s: remove it first", m.PeerURLs, peerURL)
			}
			id, members = m.ID, list.Members
			return nil
		}
		// etcd takes one learner at a time, and refuses a second only
		// once the add has gone through raft, where every refused
		// attempt would compete with the other learner's promotion.
		if i := slices.IndexFunc(list.Members, func(m *pb.Member) bool { return m.IsLearner }); i >= 0 {
			other := list.Members[i]
			return fmt.Errorf("%w: %s at %s; once it is a voter this one joins (a learner left by a failed join stays: remove it with `kubeboot etcd members remove %x`)",
				errLearnerJoining, cmp.Or(other.Name, "one not started yet"), strings.Join(other.PeerURLs, ","), other.ID)
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

// InitialCluster is etcd's --initial-cluster for a member joining members:
// every member's name=peerURL, this one included under its own name.
func InitialCluster(members []*pb.Member, self uint64, name string) string {
	var parts []string
	for _, m := range members {
		n := m.Name
		if m.ID == self {
			n = name
		}
		if n == "" {
			continue
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// PromoteLearner promotes member id to a voter, retrying while it catches
// up with the leader, until timeout. A member that votes already is done.
func PromoteLearner(ctx context.Context, cli *clientv3.Client, id uint64, timeout time.Duration, report Reporter) error {
	attempt := 0
	var last error
	err := wait.PollUntilContextTimeout(ctx, retryInterval, timeout, true, func(ctx context.Context) (bool, error) {
		attempt++
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		_, last = cli.MemberPromote(rctx, id)
		cancel()
		switch {
		case last == nil, isEtcdError(last, rpctypes.ErrMemberNotLearner):
			return true, nil
		case !isEtcdError(last, rpctypes.ErrMemberLearnerNotReady) && !isUnavailable(last):
			return false, fmt.Errorf("promote etcd learner %x: %w", id, last)
		}
		if attempt == 1 || attempt%10 == 0 {
			report.Infof("etcd learner %x is catching up with the leader (attempt %d)", id, attempt)
		}
		return false, nil
	})
	switch {
	case err == nil || !wait.Interrupted(err):
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("promote etcd learner %x: %w", id, ctx.Err())
	}
	return &exit.TimeoutError{Msg: fmt.Sprintf("promote etcd learner %x: still not in sync with the leader after %s (%d attempts): %v", id, timeout, attempt, last)}
}

// RemoveMember removes member id from the cluster; a member that is gone
// already is done.
func RemoveMember(ctx context.Context, cli *clientv3.Client, id uint64) error {
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

// WaitMember waits until the member at endpoint answers and knows a
// leader, which a joining member does once it has started and reached the
// cluster.
func WaitMember(ctx context.Context, cli *clientv3.Client, endpoint string, timeout time.Duration, report Reporter) error {
	report.Infof("waiting for the local etcd member at %s", endpoint)
	var last error
	err := wait.PollUntilContextTimeout(ctx, retryInterval, timeout, true, func(ctx context.Context) (bool, error) {
		sctx, cancel := context.WithTimeout(ctx, statusTimeout)
		resp, err := cli.Status(sctx, endpoint)
		cancel()
		if err == nil && resp.Leader != 0 {
			report.Infof("local etcd member is up and follows leader %x (raft index %d)", resp.Leader, resp.RaftIndex)
			return true, nil
		}
		last = err
		if err == nil {
			last = errors.New("no leader known yet")
		}
		return false, nil
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("wait for local etcd member %s: %w", endpoint, ctx.Err())
	}
	return &exit.TimeoutError{Msg: fmt.Sprintf("wait for local etcd member %s: not up after %s: %v (see `crictl logs` of etcd)", endpoint, timeout, last)}
}

// errLearnerJoining is AddLearner's refusal while another member is a
// learner, which retryReconfig waits out.
var errLearnerJoining = errors.New("another etcd member is joining as a learner")

// retryReconfig runs a membership change, retrying while etcd refuses it
// as unsafe for now: "unhealthy cluster" until every member has been
// connected for a few seconds, as right after a join, no leader during
// an election, or another node's member joining as a learner (two nodes
// that boot at once). Other errors, and the last one after
// reconfigTimeout, are returned.
func retryReconfig(ctx context.Context, op func(context.Context) error) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, retryInterval, reconfigTimeout, true, func(ctx context.Context) (bool, error) {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		last = op(rctx)
		cancel()
		switch {
		case last == nil:
			return true, nil
		case !isEtcdError(last, rpctypes.ErrUnhealthy) && !isEtcdError(last, rpctypes.ErrTooManyLearners) && !errors.Is(last, errLearnerJoining) && !isUnavailable(last):
			return false, last
		}
		return false, nil
	})
	if wait.Interrupted(err) && ctx.Err() == nil {
		return last
	}
	return err
}
