package etcd

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
)

// threeVoters is a cluster of m1, m2 and m3, all voting.
func threeVoters(t *testing.T) []*etcdNode {
	t.Helper()
	m1, m2 := twoVoters(t)
	m3 := newEtcdNode(t, "m3")
	id := joinAsLearner(t, m1, m3)
	if err := PromoteLearner(t.Context(), m1.cli(t), id, 30*time.Second, &lines{}); err != nil {
		t.Fatal(err)
	}
	return []*etcdNode{m1, m2, m3}
}

// listMembers lists the members through n, failing the test on an error.
func listMembers(t *testing.T, n *etcdNode) MemberList {
	t.Helper()
	list, err := ListMembers(t.Context(), n.cli(t))
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// byName is the member called name in list.
func byName(t *testing.T, list MemberList, name string) MemberStatus {
	t.Helper()
	i := slices.IndexFunc(list.Members, func(m MemberStatus) bool { return m.Name == name })
	if i < 0 {
		t.Fatalf("no member %s in %+v", name, list.Members)
	}
	return list.Members[i]
}

// leaders are the names of the members list shows as the leader.
func leaders(list MemberList) []string {
	var out []string
	for _, m := range list.Members {
		if m.Leader {
			out = append(out, m.Name)
		}
	}
	return out
}

func TestListMembersHealthyThenOneStopped(t *testing.T) {
	nodes := threeVoters(t)
	list := listMembers(t, nodes[0])
	if len(list.Members) != 3 || len(list.Alarms) != 0 || list.AlarmsError != "" {
		t.Fatalf("list: %+v", list)
	}
	if got := leaders(list); len(got) != 1 {
		t.Errorf("leaders %v, want one", got)
	}
	for i, n := range nodes {
		m := list.Members[i] // sorted by name
		if m.Name != n.name || m.Learner || !m.Healthy || m.Problem != "" || len(m.Errors) != 0 {
			t.Errorf("member %d: %+v, want %s, a healthy voter", i, m, n.name)
		}
		if !slices.Equal(m.ClientURLs, []string{n.client}) || !slices.Equal(m.PeerURLs, []string{n.peer}) || m.ID == 0 {
			t.Errorf("%s: URLs %v %v, ID %s", n.name, m.ClientURLs, m.PeerURLs, m.ID)
		}
		if m.DBSize <= 0 || m.DBSizeInUse <= 0 || m.RaftIndex == 0 || m.RaftTerm == 0 || m.Version == "" {
			t.Errorf("%s: db %d (in use %d), raft %d/%d, version %q", n.name, m.DBSize, m.DBSizeInUse, m.RaftIndex, m.RaftTerm, m.Version)
		}
	}

	// Stop a follower, so that the leader stays: it shows as unhealthy,
	// the others as they were.
	stopped := nodes[slices.IndexFunc(nodes[1:], func(n *etcdNode) bool { return !byName(t, list, n.name).Leader })+1]
	stopped.stop()
	list = listMembers(t, nodes[0])
	if m := byName(t, list, stopped.name); m.Healthy || m.Leader || !strings.Contains(m.Problem, stopped.client) || m.DBSize != 0 {
		t.Errorf("stopped member: %+v", m)
	}
	for _, n := range nodes {
		if n != stopped && !byName(t, list, n.name).Healthy {
			t.Errorf("%s is not healthy: %+v", n.name, byName(t, list, n.name))
		}
	}
	if got := leaders(list); len(got) != 1 || got[0] == stopped.name {
		t.Errorf("leaders %v after stopping %s", got, stopped.name)
	}
}

func TestRemoveMemberByName(t *testing.T) {
	nodes := threeVoters(t)
	m1, m3 := nodes[0], nodes[2]
	quiet := &lines{}

	// Refusals, which change nothing.
	for name, want := range map[string]string{
		"nope": `etcd member "nope": the cluster has no member of that name (its members: m1, m2, m3)`,
		"m1":   "this node's own member: run `kubeboot reset` on this node instead",
	} {
		err := RemoveMemberByName(t.Context(), m1.cli(t), name, m1.name, m1.peer, quiet)
		if err == nil || !strings.Contains(err.Error(), want) || exit.Code(err) != exit.Usage {
			t.Errorf("remove %s: %v (exit %d), want %q, exit 2", name, err, exit.Code(err), want)
		}
	}
	if voters, _ := members(t, m1.cli(t)); len(voters) != 3 {
		t.Fatalf("a refused removal changed the members: %v", voters)
	}

	// Three voters, one dead: without it, 2 of 2 answer.
	m3.stop()
	if err := RemoveMemberByName(t.Context(), m1.cli(t), m3.name, m1.name, m1.peer, quiet); err != nil {
		t.Fatal(err)
	}
	if voters, learners := members(t, m1.cli(t)); !slices.Equal(slices.Sorted(slices.Values(voters)), []string{"m1", "m2"}) || len(learners) != 0 {
		t.Fatalf("after removing m3: voters %v, learners %v", voters, learners)
	}
	if !strings.Contains(quiet.String(), "removed etcd member m3") {
		t.Errorf("no report of the removal: %q", quiet.String())
	}

	// A learner, started (by name) or not (by its hex ID): etcd allows
	// one at a time.
	learner := newEtcdNode(t, "learner")
	joinAsLearner(t, m1, learner)
	removeLearner(t, m1, learner.name)
	unstarted := newEtcdNode(t, "unstarted")
	id, _, err := AddLearner(t.Context(), m1.cli(t), unstarted.name, unstarted.peer)
	if err != nil {
		t.Fatal(err)
	}
	removeLearner(t, m1, MemberID(id).String())
}

// removeLearner removes the learner called name through n's node, and
// checks that no learner is left.
func removeLearner(t *testing.T, n *etcdNode, name string) {
	t.Helper()
	if err := RemoveMemberByName(t.Context(), n.cli(t), name, n.name, n.peer, &lines{}); err != nil {
		t.Fatalf("remove learner %s: %v", name, err)
	}
	if voters, learners := members(t, n.cli(t)); len(voters) != 2 || len(learners) != 0 {
		t.Fatalf("after removing learner %s: voters %v, learners %v", name, voters, learners)
	}
}

// TestRemovalRefusedWithoutQuorum: three voters, two dead; without one of
// the dead, 1 of 2 answers, short of a quorum.
func TestRemovalRefusedWithoutQuorum(t *testing.T) {
	nodes := threeVoters(t)
	m1, m2, m3 := nodes[0], nodes[1], nodes[2]
	m2.stop()
	m3.stop()
	err := RemoveMemberByName(t.Context(), m1.cli(t), m3.name, m1.name, m1.peer, &lines{})
	want := `etcd member "m3" cannot be removed: the 2 remaining voting member(s) need 2 healthy for a quorum, but only 1 answer (down: [m2])`
	if err == nil || !strings.Contains(err.Error(), want) || exit.Code(err) != exit.Usage {
		t.Fatalf("remove without quorum: %v (exit %d), want %q, exit 2", err, exit.Code(err), want)
	}
	if voters := votersOf(m1); len(voters) != 3 {
		t.Errorf("a refused removal changed the members: %v", voters)
	}
}

func TestCheckRemoval(t *testing.T) {
	// cluster is members a..e: an upper-case letter is down, an "l"
	// prefix a learner. The node runs "a".
	cluster := func(spec ...string) []MemberStatus {
		var out []MemberStatus
		for i, s := range spec {
			learner := strings.HasPrefix(s, "l")
			name := strings.TrimPrefix(s, "l")
			out = append(out, MemberStatus{Name: strings.ToLower(name), ID: MemberID(i + 1), PeerURLs: []string{"https://" + strings.ToLower(name) + ":2380"},
				Learner: learner, Healthy: name == strings.ToLower(name)})
		}
		return out
	}
	for _, tc := range []struct {
		about   string
		members []MemberStatus
		remove  string
		want    string // empty: allowed
	}{
		{"3 voters, 1 down: its removal leaves 2 of 2", cluster("a", "b", "C"), "c", ""},
		{"3 voters, 2 down: a down one's leaves 1 of 2", cluster("a", "B", "C"), "c", "the 2 remaining voting member(s) need 2 healthy for a quorum, but only 1 answer (down: [b])"},
		{"3 voters, all up: 2 of 2 remain", cluster("a", "b", "c"), "b", ""},
		{"2 voters: 1 of 1 remains", cluster("a", "b"), "b", ""},
		{"2 voters, this one down: 0 of 1", cluster("A", "b"), "b", "need 1 healthy for a quorum, but only 0 answer (down: [a])"},
		{"5 voters, 2 down: a healthy one's leaves 2 of 4", cluster("a", "b", "c", "D", "E"), "c", "need 3 healthy for a quorum, but only 2 answer (down: [d e])"},
		{"5 voters, 2 down: a down one's leaves 3 of 4", cluster("a", "b", "c", "D", "E"), "d", ""},
		{"learners do not count toward a quorum", cluster("a", "b", "C", "ld", "le"), "b", "the 2 remaining voting member(s) need 2 healthy for a quorum, but only 1 answer (down: [c])"},
		{"a learner, however many voters are down", cluster("a", "B", "C", "ld"), "d", ""},
		{"a down learner", cluster("a", "lD"), "d", ""},
		{"the last voter", cluster("la", "b"), "b", "it is the last voting member"},
		{"by hex ID", cluster("a", "b", "C"), "3", ""},
		{"not a member", cluster("a", "b"), "x", `etcd member "x": the cluster has no member of that name (its members: a, b)`},
		{"an empty name", cluster("a", "b"), "", "no member of that name"},
		{"this node's own member", cluster("a", "b", "c"), "a", "run `kubeboot reset` on this node instead"},
		{"this node's own, by ID", cluster("a", "b", "c"), "1", "run `kubeboot reset` on this node instead"},
	} {
		got, err := CheckRemoval(tc.members, tc.remove, "a", "https://a:2380")
		switch {
		case tc.want == "" && (err != nil || (got.Name != tc.remove && got.ID.String() != tc.remove)):
			t.Errorf("%s: %+v, %v; want %s allowed", tc.about, got, err, tc.remove)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || exit.Code(err) != exit.Usage):
			t.Errorf("%s: %v (exit %d), want %q, exit 2", tc.about, err, exit.Code(err), tc.want)
		}
	}
}

// TestMemberStatusesLeader: the leader is the one the answer of the highest
// term names; a member without an answer is unhealthy and says why.
func TestMemberStatusesLeader(t *testing.T) {
	members := []*pb.Member{{ID: 3, Name: "c"}, {ID: 1, Name: "a"}, {ID: 2, Name: "b"}}
	answer := func(leader, term uint64) statusAnswer {
		return statusAnswer{resp: &clientv3.StatusResponse{Leader: leader, RaftTerm: term, DbSize: 1}}
	}
	got := memberStatuses(members, []statusAnswer{answer(2, 5), answer(3, 4), {err: errSample}})
	if names := []string{got[0].Name, got[1].Name, got[2].Name}; !slices.Equal(names, []string{"a", "b", "c"}) {
		t.Fatalf("order %v", names)
	}
	if !got[1].Leader || got[0].Leader || got[2].Leader {
		t.Errorf("leader: %+v", got)
	}
	if got[1].Healthy || got[1].Problem != errSample.Error() || got[0].DBSize != 1 || !got[0].Healthy {
		t.Errorf("health: %+v", got)
	}
}

// errSample is a status request's failure.
var errSample = errors.New("no status answer")

// TestAnsweringAndClientURLsOf: the members other than self that answer,
// by name (or ID), and the client URLs of an --initial-cluster's members.
func TestAnsweringAndClientURLsOf(t *testing.T) {
	list := MemberList{Members: []MemberStatus{
		{Name: "cp1", Healthy: true}, {Name: "cp2", Healthy: true}, {Name: "cp3"}, {ID: 0xab, Healthy: true},
	}}
	if got := strings.Join(Answering(list, "cp1"), ","); got != "cp2,ab" {
		t.Errorf("Answering = %q, want cp2,ab", got)
	}
	got := ClientURLsOf("cp1=https://10.0.0.11:2380,cp2=https://[fd00::12]:2380,broken")
	if strings.Join(got, ",") != "https://10.0.0.11:2379,https://[fd00::12]:2379" {
		t.Errorf("ClientURLsOf = %v", got)
	}
}

// TestLocalMembers: ListLocalMembers and RemoveLocalMember ask the member
// at the endpoint given, else this node's own, with the node's TLS files,
// and RemoveLocalMember never removes the node's own member.
func TestLocalMembers(t *testing.T) {
	n := newEtcdNode(t, "node-1")
	n.start(t)
	c := config.New()
	config.SetDefaults(c, config.Host{Name: "node-1", Address: "192.0.2.1"})
	// The member speaks plain HTTP: no TLS file to read.
	noTLS := func(string) string { return "" }

	list, err := ListLocalMembers(t.Context(), c, n.client, noTLS)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Members) != 1 || list.Members[0].Name != "node-1" || !list.Members[0].Healthy {
		t.Errorf("members %+v", list.Members)
	}
	err = RemoveLocalMember(t.Context(), c, n.client, noTLS, "node-1", &lines{})
	if err == nil || !strings.Contains(err.Error(), "this node's own member") || exit.Code(err) != exit.Usage {
		t.Errorf("removing the node's own member: %v", err)
	}
	if voters, _ := members(t, n.cli(t)); len(voters) != 1 {
		t.Errorf("a refused removal changed the members: %v", voters)
	}

	// No endpoint: this node's member, at its advertised client URL.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := ListLocalMembers(ctx, c, "", noTLS); err == nil || !strings.Contains(err.Error(), "https://192.0.2.1:2379") {
		t.Errorf("no endpoint: %v, want this node's client URL", err)
	}
	// The TLS files are the node's, mapped to this machine.
	missing := func(p string) string { return filepath.Join(t.TempDir(), p) }
	if err := RemoveLocalMember(t.Context(), c, n.client, missing, "ghost", &lines{}); err == nil || !strings.Contains(err.Error(), "read etcd client TLS file") {
		t.Errorf("missing TLS files: %v", err)
	}
}
