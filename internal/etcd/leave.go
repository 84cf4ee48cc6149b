package etcd

import (
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Leave removes this node's member from its cluster. It is for
// `kubeboot reset`, which calls it before stopping the local etcd and
// deleting its data dir, so that the remaining members stop waiting for a
// node that will not come back. cli reaches this member and, when it is
// down, others.
//
// The member is the one called name, or the unstarted learner at peerURL;
// one that is gone already leaves nothing to do. Leave refuses when the
// removal would leave the cluster without a healthy quorum, or would remove
// the last member, and says why; force removes it anyway.
func Leave(ctx context.Context, cli *clientv3.Client, name, peerURL string, force bool, report Reporter) error {
	lctx, cancel := context.WithTimeout(ctx, requestTimeout)
	// Serializable: a member that lost its quorum still answers, so the
	// refusal below can say which members are down.
	list, err := cli.MemberList(lctx, clientv3.WithSerializable())
	cancel()
	if err != nil {
		return fmt.Errorf("list etcd members: %w", err)
	}
	self := FindMember(list.Members, name, peerURL)
	if self == nil {
		report.Infof("etcd member %s is not in the cluster: nothing to remove", name)
		return nil
	}
	if !self.IsLearner {
		if force && len(voters(list.Members)) == 1 {
			// The last member cannot leave: the cluster ends with it.
			report.Infof("etcd member %s is the last one: the cluster ends with it", name)
			return nil
		}
		if err := checkQuorumWithout(ctx, cli, list.Members, self); err != nil {
			if !force {
				return fmt.Errorf("remove etcd member %q: %w (reset --force removes it anyway)", name, err)
			}
			report.Warnf("removing etcd member %s anyway (forced): %v", name, err)
		}
	}
	// Send the removal through the other members, which stay.
	var others []string
	for _, m := range list.Members {
		if m.ID != self.ID && !m.IsLearner {
			others = append(others, m.ClientURLs...)
		}
	}
	if len(others) > 0 {
		cli.SetEndpoints(others...)
	}
	if err := RemoveMember(ctx, cli, self.ID); err != nil {
		return err
	}
	report.Infof("removed etcd member %s (%x); %d member(s) remain", name, self.ID, len(list.Members)-1)
	return nil
}

// checkQuorumWithout says why removing self would break the cluster: it is
// the last voting member, or too few of the remaining voting members are
// healthy to form a quorum of the smaller cluster.
func checkQuorumWithout(ctx context.Context, cli *clientv3.Client, members []*pb.Member, self *pb.Member) error {
	return quorumWithout(memberStatuses(members, statuses(ctx, cli, members)), MemberStatus{ID: MemberID(self.ID)})
}

// voters lists the voting members.
func voters(members []*pb.Member) []*pb.Member {
	var out []*pb.Member
	for _, m := range members {
		if !m.IsLearner {
			out = append(out, m)
		}
	}
	return out
}
