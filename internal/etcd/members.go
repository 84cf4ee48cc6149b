package etcd

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
)

// MemberID is an etcd member's ID, written in hex as etcdctl writes it.
type MemberID uint64

// String is the ID in hex.
func (id MemberID) String() string { return strconv.FormatUint(uint64(id), 16) }

// MarshalText writes the ID in hex, as a JSON string.
func (id MemberID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText reads an ID in hex, so that the JSON form reads back.
func (id *MemberID) UnmarshalText(text []byte) error {
	v, err := strconv.ParseUint(string(text), 16, 64)
	if err != nil {
		return fmt.Errorf("etcd member ID %q: want hex digits: %w", text, err)
	}
	*id = MemberID(v)
	return nil
}

// MemberStatus is one member of an etcd cluster and what it answered to a
// status request. Its JSON form is `kubeboot etcd members list -o json`'s.
type MemberStatus struct {
	// Name is the member's name, its node's; empty for a learner that has
	// not started yet.
	Name string `json:"name"`
	// ID is the member's ID.
	ID MemberID `json:"id"`
	// PeerURLs and ClientURLs are the URLs the member advertises.
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs"`
	// Learner says that the member does not vote.
	Learner bool `json:"learner"`
	// Leader says that the member is the cluster's leader.
	Leader bool `json:"leader"`
	// Healthy says that the member answered its status request on one of
	// its client URLs within statusTimeout.
	Healthy bool `json:"healthy"`
	// Problem is why it did not, when it is not healthy.
	Problem string `json:"problem,omitempty"`
	// Errors are what a member that answered reports wrong with itself,
	// such as no leader or a raised alarm.
	Errors []string `json:"errors"`
	// Version is the etcd release it runs.
	Version string `json:"version,omitempty"`
	// DBSize is the size of its database file, and DBSizeInUse the part
	// of it in use, in bytes.
	DBSize      int64 `json:"dbSize"`
	DBSizeInUse int64 `json:"dbSizeInUse"`
	// RaftIndex and RaftTerm are its raft log's index and term.
	RaftIndex uint64 `json:"raftIndex"`
	RaftTerm  uint64 `json:"raftTerm"`
}

// Alarm is an alarm raised in the cluster, such as NOSPACE or CORRUPT.
type Alarm struct {
	// MemberID is the member that raised it, and Member its name.
	MemberID MemberID `json:"memberID"`
	Member   string   `json:"member"`
	// Alarm is its type: NOSPACE or CORRUPT.
	Alarm string `json:"alarm"`
}

// MemberList is the members of an etcd cluster and its alarms. Its JSON
// form is `kubeboot etcd members list -o json`'s output.
type MemberList struct {
	// Members are sorted by name, then ID.
	Members []MemberStatus `json:"members"`
	// Alarms are the cluster's active alarms.
	Alarms []Alarm `json:"alarms"`
	// AlarmsError is why the alarms could not be read (a cluster without
	// a quorum cannot say); Alarms is then empty.
	AlarmsError string `json:"alarmsError,omitempty"`
}

// statusAnswer is a member's answer to a status request, or why it gave
// none.
type statusAnswer struct {
	resp *clientv3.StatusResponse
	err  error
}

// ListLocalMembers lists the members of the cluster of this control-plane
// node's member (see ListMembers), asked through endpoint, or through the
// member's own client URL for "", with the node's API server etcd client
// certificate (LocalTLS); hostPath maps a node path to this machine's.
func ListLocalMembers(ctx context.Context, c *config.ClusterConfiguration, endpoint string, hostPath func(string) string) (MemberList, error) {
	cli, err := localClient(ctx, c, endpoint, hostPath)
	if err != nil {
		return MemberList{}, err
	}
	defer func() { _ = cli.Close() }()
	return ListMembers(ctx, cli)
}

// RemoveLocalMember removes the member called name (or with hex ID name)
// from the cluster of this control-plane node's member, asked through
// endpoint as ListLocalMembers asks, if CheckRemoval allows it: never this
// node's own member (see RemoveMemberByName).
func RemoveLocalMember(ctx context.Context, c *config.ClusterConfiguration, endpoint string, hostPath func(string) string, name string, report Reporter) error {
	cli, err := localClient(ctx, c, endpoint, hostPath)
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	return RemoveMemberByName(ctx, cli, name, c.Node.Name, PeerURL(c), report)
}

// localClient is a client of endpoint, or of this node's member for "",
// with LocalTLS's files. Close it when done.
func localClient(ctx context.Context, c *config.ClusterConfiguration, endpoint string, hostPath func(string) string) (*clientv3.Client, error) {
	if endpoint == "" {
		endpoint = ClientURL(c)
	}
	return New(ctx, []string{endpoint}, LocalTLS(c, hostPath))
}

// ListMembers lists the members of the cluster behind cli, with each
// member's status asked on its own client URLs, and the cluster's alarms.
func ListMembers(ctx context.Context, cli *clientv3.Client) (MemberList, error) {
	list, err := memberList(ctx, cli)
	if err != nil {
		return MemberList{}, fmt.Errorf("list etcd members through %s: %w", strings.Join(cli.Endpoints(), ","), err)
	}
	out := MemberList{Members: memberStatuses(list.Members, statuses(ctx, cli, list.Members)), Alarms: []Alarm{}}
	// WithRequireLeader: without a quorum, fail at once rather than wait.
	actx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), requestTimeout)
	alarms, err := cli.AlarmList(actx)
	cancel()
	if err != nil {
		out.AlarmsError = err.Error()
		return out, nil
	}
	out.Alarms = alarmsOf(alarms.Alarms, list.Members)
	return out, nil
}

// memberList lists the members as the cluster's leader knows them, or,
// when that fails (no leader, no quorum), as the member behind cli knows
// them (serializable): a member that lost its quorum still answers, so the
// list can say which members are down. A serializable list alone could
// miss a change the member has not applied yet.
func memberList(ctx context.Context, cli *clientv3.Client) (*clientv3.MemberListResponse, error) {
	lctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), statusTimeout)
	list, err := cli.MemberList(lctx)
	cancel()
	if err == nil {
		return list, nil
	}
	sctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return cli.MemberList(sctx, clientv3.WithSerializable())
}

// statuses asks every member for its status at the same time, so that
// members that are down cost one statusTimeout in all.
func statuses(ctx context.Context, cli *clientv3.Client, members []*pb.Member) []statusAnswer {
	answers := make([]statusAnswer, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Go(func() { answers[i] = status(ctx, cli, m) })
	}
	wg.Wait()
	return answers
}

// status asks m for its status on each of its client URLs in turn, until
// one answers within statusTimeout.
func status(ctx context.Context, cli *clientv3.Client, m *pb.Member) statusAnswer {
	if len(m.ClientURLs) == 0 {
		return statusAnswer{err: fmt.Errorf("no client URL: a learner that has not started")}
	}
	var problems []string
	for _, u := range m.ClientURLs {
		sctx, cancel := context.WithTimeout(ctx, statusTimeout)
		resp, err := cli.Status(sctx, u)
		cancel()
		if err == nil {
			return statusAnswer{resp: resp}
		}
		problems = append(problems, fmt.Sprintf("no status answer from %s within %s: %v", u, statusTimeout, err))
	}
	return statusAnswer{err: fmt.Errorf("%s", strings.Join(problems, "; "))}
}

// memberStatuses combines the members with their answers (answers[i] is
// members[i]'s), sorted by name then ID. The leader is the one named by the
// answer of the highest raft term.
func memberStatuses(members []*pb.Member, answers []statusAnswer) []MemberStatus {
	var leader, term uint64
	for _, a := range answers {
		if a.resp != nil && a.resp.Leader != 0 && a.resp.RaftTerm >= term {
			leader, term = a.resp.Leader, a.resp.RaftTerm
		}
	}
	out := make([]MemberStatus, len(members))
	for i, m := range members {
		s := MemberStatus{Name: m.Name, ID: MemberID(m.ID), PeerURLs: orEmpty(m.PeerURLs), ClientURLs: orEmpty(m.ClientURLs),
			Learner: m.IsLearner, Leader: leader != 0 && m.ID == leader, Errors: []string{}}
		if a := answers[i]; a.err != nil {
			s.Problem = a.err.Error()
		} else {
			s.Healthy, s.Errors, s.Version = true, orEmpty(a.resp.Errors), a.resp.Version
			s.DBSize, s.DBSizeInUse, s.RaftIndex, s.RaftTerm = a.resp.DbSize, a.resp.DbSizeInUse, a.resp.RaftIndex, a.resp.RaftTerm
		}
		out[i] = s
	}
	slices.SortFunc(out, func(a, b MemberStatus) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID)) })
	return out
}

// alarmsOf are the raised alarms, each with its member's name.
func alarmsOf(alarms []*pb.AlarmMember, members []*pb.Member) []Alarm {
	out := []Alarm{}
	for _, a := range alarms {
		if a.Alarm == pb.AlarmType_NONE {
			continue
		}
		name := ""
		for _, m := range members {
			if m.ID == a.MemberID {
				name = m.Name
			}
		}
		out = append(out, Alarm{MemberID: MemberID(a.MemberID), Member: name, Alarm: a.Alarm.String()})
	}
	return out
}

// CheckRemoval decides whether the member called name (or, for a learner
// that never started and so has no name, whose hex ID is name) may be
// removed from the cluster of members, by the node whose own member is
// the one called selfName or at selfPeerURL. It returns that member, or an
// *exit.UsageError that names it, says why not and what to do instead: it
// is not a member; it is this node's own (which `kubeboot reset` removes);
// or it votes, and without it too few voters would answer to form a
// quorum. A learner does not vote, so it can always be removed.
func CheckRemoval(members []MemberStatus, name, selfName, selfPeerURL string) (MemberStatus, error) {
	i := slices.IndexFunc(members, func(m MemberStatus) bool { return name != "" && (m.Name == name || m.ID.String() == name) })
	if i < 0 {
		return MemberStatus{}, &exit.UsageError{Msg: fmt.Sprintf("etcd member %q: the cluster has no member of that name (its members: %s); `kubeboot etcd members list` shows them",
			name, strings.Join(memberNames(members), ", "))}
	}
	target := members[i]
	if (selfName != "" && target.Name == selfName) || slices.Contains(target.PeerURLs, selfPeerURL) {
		return MemberStatus{}, &exit.UsageError{Msg: fmt.Sprintf("etcd member %q is this node's own member: run `kubeboot reset` on this node instead, which removes it and cleans up the node", name)}
	}
	if target.Learner {
		return target, nil
	}
	if err := quorumWithout(members, target); err != nil {
		return MemberStatus{}, &exit.UsageError{Msg: fmt.Sprintf("etcd member %q cannot be removed: %v; bring the members that are down back first (`kubeboot etcd members list` shows them), then remove it", name, err)}
	}
	return target, nil
}

// quorumWithout says why removing the voter target would break the
// cluster: it is the last voting member, or too few of the remaining voting
// members are healthy to form a quorum of the smaller cluster. It decides as
// Leave's checkQuorumWithout does, on statuses already read.
func quorumWithout(members []MemberStatus, target MemberStatus) error {
	var remaining int
	var down []string
	for _, m := range members {
		if m.ID == target.ID || m.Learner {
			continue
		}
		remaining++
		if !m.Healthy {
			down = append(down, m.Name)
		}
	}
	if remaining == 0 {
		return fmt.Errorf("it is the last voting member: removing it ends the cluster and its data")
	}
	quorum, healthy := remaining/2+1, remaining-len(down)
	if healthy < quorum {
		slices.Sort(down)
		return fmt.Errorf("the %d remaining voting member(s) need %d healthy for a quorum, but only %d answer (down: %v)",
			remaining, quorum, healthy, down)
	}
	return nil
}

// RemoveMemberByName removes the member called name (or with hex ID name)
// from the cluster behind cli, on the node whose own member is the one
// called selfName or at selfPeerURL, if CheckRemoval allows it. The
// removal goes through the healthy voters that stay: it points cli at
// them.
func RemoveMemberByName(ctx context.Context, cli *clientv3.Client, name, selfName, selfPeerURL string, report Reporter) error {
	list, err := ListMembers(ctx, cli)
	if err != nil {
		return err
	}
	target, err := CheckRemoval(list.Members, name, selfName, selfPeerURL)
	if err != nil {
		return err
	}
	var stay []string
	for _, m := range list.Members {
		if m.ID != target.ID && m.Healthy && !m.Learner {
			stay = append(stay, m.ClientURLs...)
		}
	}
	if len(stay) > 0 {
		cli.SetEndpoints(stay...)
	}
	role := "voter"
	if target.Learner {
		role = "learner"
	}
	report.Infof("removing etcd member %s (%s, a %s) through %s", name, target.ID, role, strings.Join(cli.Endpoints(), ","))
	if err := RemoveMember(ctx, cli, uint64(target.ID)); err != nil {
		return err
	}
	report.Infof("removed etcd member %s (%s); %d member(s) remain", name, target.ID, len(list.Members)-1)
	return nil
}

// memberNames are the members' names, an unstarted learner's hex ID for
// its name.
func memberNames(members []MemberStatus) []string {
	var names []string
	for _, m := range members {
		if m.Name == "" {
			names = append(names, m.ID.String()+" (a learner that has not started)")
			continue
		}
		names = append(names, m.Name)
	}
	return names
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Answering names the members of list other than the one called self
// that answered their status request: those that would go on serving the
// cluster's data beside a member restored from a snapshot.
func Answering(list MemberList, self string) []string {
	var names []string
	for _, m := range list.Members {
		if m.Healthy && m.Name != self {
			names = append(names, cmp.Or(m.Name, m.ID.String()))
		}
	}
	return names
}

// ClientURLsOf are the client URLs of the members an --initial-cluster
// (name=peerURL,...) names, each at its peer URL's host on kubeboot's etcd
// client port.
func ClientURLsOf(initialCluster string) []string {
	var urls []string
	for _, member := range strings.Split(initialCluster, ",") {
		_, peer, ok := strings.Cut(member, "=")
		u, err := url.Parse(peer)
		if !ok || err != nil || u.Hostname() == "" {
			continue
		}
		urls = append(urls, "https://"+net.JoinHostPort(u.Hostname(), strconv.Itoa(config.PortEtcdClient)))
	}
	return urls
}
