package etcd

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdNode is an embedded etcd member over plain HTTP: membership logic
// does not depend on TLS, which health's tests cover.
type etcdNode struct {
	name      string
	client    string
	peer      string
	cfg       *embed.Config
	stop      func()
	etcd      *embed.Etcd
	clientCli *clientv3.Client
}

func freeLocalAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// newEtcdNode prepares, but does not start, a member called name.
func newEtcdNode(t *testing.T, name string) *etcdNode {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = filepath.Join(t.TempDir(), name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	client := url.URL{Scheme: "http", Host: freeLocalAddr(t)}
	peer := url.URL{Scheme: "http", Host: freeLocalAddr(t)}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(name)
	return &etcdNode{name: name, client: client.String(), peer: peer.String(), cfg: cfg}
}

// start runs the member until the test ends and waits until it is ready.
func (n *etcdNode) start(t *testing.T) {
	t.Helper()
	e, err := embed.StartEtcd(n.cfg)
	if err != nil {
		t.Fatalf("start etcd %s: %v", n.name, err)
	}
	n.etcd, n.stop = e, sync.OnceFunc(e.Close)
	t.Cleanup(n.stop)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatalf("etcd %s did not become ready", n.name)
	}
}

func (n *etcdNode) cli(t *testing.T) *clientv3.Client {
	t.Helper()
	if n.clientCli == nil {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{n.client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		n.clientCli = cli
	}
	return n.clientCli
}

func members(t *testing.T, cli *clientv3.Client) (voters, learners []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range resp.Members {
		name := m.Name
		if name == "" {
			name = strings.Join(m.PeerURLs, ",")
		}
		if m.IsLearner {
			learners = append(learners, name)
		} else {
			voters = append(voters, name)
		}
	}
	return voters, learners
}

// joinAsLearner adds n to the cluster of first as a learner and starts it.
func joinAsLearner(t *testing.T, first, n *etcdNode) uint64 {
	t.Helper()
	id, all, err := AddLearner(t.Context(), first.cli(t), n.name, n.peer)
	if err != nil {
		t.Fatal(err)
	}
	n.cfg.InitialCluster = InitialCluster(all, id, n.name)
	n.cfg.ClusterState = embed.ClusterStateFlagExisting
	n.start(t)
	return id
}

// twoVoters is a cluster of m1 and m2, both voting.
func twoVoters(t *testing.T) (m1, m2 *etcdNode) {
	t.Helper()
	m1, m2 = newEtcdNode(t, "m1"), newEtcdNode(t, "m2")
	m1.start(t)
	id := joinAsLearner(t, m1, m2)
	if err := PromoteLearner(t.Context(), m1.cli(t), id, 30*time.Second, &lines{}); err != nil {
		t.Fatal(err)
	}
	return m1, m2
}

func TestJoinAsLearnerThenPromote(t *testing.T) {
	m1, m2 := newEtcdNode(t, "m1"), newEtcdNode(t, "m2")
	m1.start(t)
	id, all, err := AddLearner(t.Context(), m1.cli(t), m2.name, m2.peer)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := InitialCluster(all, id, m2.name), "m1="+m1.peer+",m2="+m2.peer; got != want {
		t.Errorf("initialCluster = %q, want %q", got, want)
	}
	// A join that crashed after adding resumes with the same member.
	again, _, err := AddLearner(t.Context(), m1.cli(t), m2.name, m2.peer)
	if err != nil || again != id {
		t.Fatalf("second addLearner = %x, %v; want the existing member %x", again, err, id)
	}
	if voters, learners := members(t, m1.cli(t)); len(voters) != 1 || len(learners) != 1 {
		t.Fatalf("after adding: voters %v, learners %v", voters, learners)
	}
	m2.cfg.InitialCluster = InitialCluster(all, id, m2.name)
	m2.cfg.ClusterState = embed.ClusterStateFlagExisting
	m2.start(t)
	var progress lines
	if err := PromoteLearner(t.Context(), m1.cli(t), id, 30*time.Second, &progress); err != nil {
		t.Fatal(err)
	}
	if voters, learners := members(t, m1.cli(t)); len(voters) != 2 || len(learners) != 0 {
		t.Fatalf("after promoting: voters %v, learners %v", voters, learners)
	}
	// Promoting a voter again is done, not an error: re-runs converge.
	// (The two voters need each other for the request: under load that
	// took more than a second.)
	if err := PromoteLearner(t.Context(), m1.cli(t), id, 30*time.Second, &progress); err != nil {
		t.Fatalf("second promote: %v", err)
	}
	// A member of that name with another peer URL is refused, not reused.
	if _, _, err := AddLearner(t.Context(), m1.cli(t), m2.name, "http://127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "remove it first") {
		t.Errorf("addLearner with a clashing name: %v", err)
	}
}

func TestPromoteStalledLearnerTimesOutThenRemove(t *testing.T) {
	m1, stalled := newEtcdNode(t, "m1"), newEtcdNode(t, "stalled")
	m1.start(t)
	// The learner is added but never started, like a join whose etcd crashes.
	id, _, err := AddLearner(t.Context(), m1.cli(t), stalled.name, stalled.peer)
	if err != nil {
		t.Fatal(err)
	}
	var progress lines
	err = PromoteLearner(t.Context(), m1.cli(t), id, 3*time.Second, &progress)
	if err == nil || !strings.Contains(err.Error(), "not in sync with the leader") {
		t.Fatalf("promote a stalled learner: %v", err)
	}
	if !strings.Contains(progress.String(), "catching up") {
		t.Errorf("no progress reported: %q", progress.String())
	}
	if err := RemoveMember(t.Context(), m1.cli(t), id); err != nil {
		t.Fatal(err)
	}
	if voters, learners := members(t, m1.cli(t)); len(voters) != 1 || len(learners) != 0 {
		t.Fatalf("after removing the learner: voters %v, learners %v", voters, learners)
	}
}

func TestLeaveCluster(t *testing.T) {
	quiet := &lines{}
	t.Run("voter leaves a healthy cluster, then again", func(t *testing.T) {
		m1, m2 := twoVoters(t)
		if err := Leave(t.Context(), both(t, m1, m2), m2.name, m2.peer, false, quiet); err != nil {
			t.Fatal(err)
		}
		if voters, _ := members(t, m1.cli(t)); len(voters) != 1 || voters[0] != "m1" {
			t.Fatalf("after leaving: voters %v", voters)
		}
		if err := Leave(t.Context(), m1.cli(t), m2.name, m2.peer, false, quiet); err != nil {
			t.Fatalf("leaving twice: %v", err)
		}
	})
	t.Run("refused without quorum", func(t *testing.T) {
		m1, m2 := twoVoters(t)
		m1.stop()
		err := Leave(t.Context(), m2.cli(t), m2.name, m2.peer, false, quiet)
		if err == nil || !strings.Contains(err.Error(), "need 1 healthy for a quorum, but only 0 answer (down: [m1])") {
			t.Fatalf("leave without quorum: %v", err)
		}
		if voters := votersOf(m2); len(voters) != 2 {
			t.Errorf("a refused leave changed the members: %v", voters)
		}
	})
	t.Run("last member refused", func(t *testing.T) {
		m1 := newEtcdNode(t, "m1")
		m1.start(t)
		err := Leave(t.Context(), m1.cli(t), m1.name, m1.peer, false, quiet)
		if err == nil || !strings.Contains(err.Error(), "last voting member") {
			t.Fatalf("leave as the last member: %v", err)
		}
	})
	t.Run("unstarted learner leaves", func(t *testing.T) {
		m1, l := newEtcdNode(t, "m1"), newEtcdNode(t, "learner")
		m1.start(t)
		if _, _, err := AddLearner(t.Context(), m1.cli(t), l.name, l.peer); err != nil {
			t.Fatal(err)
		}
		if err := Leave(t.Context(), m1.cli(t), l.name, l.peer, false, quiet); err != nil {
			t.Fatal(err)
		}
		if voters, learners := members(t, m1.cli(t)); len(voters) != 1 || len(learners) != 0 {
			t.Fatalf("after the learner left: voters %v, learners %v", voters, learners)
		}
	})
}

// both is a client of m1 and m2, as reset connects to the local
// member and the others.
func both(t *testing.T, m1, m2 *etcdNode) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m2.client, m1.client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// votersOf lists the voting members as n sees them, without needing a
// leader.
func votersOf(n *etcdNode) []string {
	var voters []string
	for _, m := range n.etcd.Server.Cluster().Members() {
		if !m.IsLearner {
			voters = append(voters, m.Name)
		}
	}
	return voters
}

func TestDescribeEtcdCluster(t *testing.T) {
	m1, l := newEtcdNode(t, "m1"), newEtcdNode(t, "learner")
	m1.start(t)
	if _, _, err := AddLearner(t.Context(), m1.cli(t), l.name, l.peer); err != nil {
		t.Fatal(err)
	}
	lines, err := Describe(t.Context(), m1.cli(t))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(lines, "\n")
	for _, want := range []string{
		"etcd cluster: 2 members, leader m1 (",
		"learners: unstarted " + l.peer,
		"etcd member m1 (",
		"voter) at " + m1.client + ": healthy, raft index",
		"learner) at : not answering",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("description lacks %q:\n%s", want, text)
		}
	}
}

// lines is a Reporter that keeps every message, one per line.
type lines struct{ strings.Builder }

func (l *lines) Infof(format string, args ...any) { fmt.Fprintf(&l.Builder, format+"\n", args...) }
func (l *lines) Warnf(format string, args ...any) {
	fmt.Fprintf(&l.Builder, "WARNING: "+format+"\n", args...)
}

// TestAddLearnerWaitsForAnotherLearner: etcd takes one learner at a time;
// a second node's add waits while the first learner is there, rather than
// failing, and goes through once it is gone.
func TestAddLearnerWaitsForAnotherLearner(t *testing.T) {
	m1, m2, m3 := newEtcdNode(t, "m1"), newEtcdNode(t, "m2"), newEtcdNode(t, "m3")
	m1.start(t)
	first, _, err := AddLearner(t.Context(), m1.cli(t), m2.name, m2.peer)
	if err != nil {
		t.Fatal(err)
	}
	added := make(chan error, 1)
	go func() {
		_, _, err := AddLearner(t.Context(), m1.cli(t), m3.name, m3.peer)
		added <- err
	}()
	select {
	case err := <-added:
		t.Fatalf("a second learner's add returned while the first was there: %v", err)
	case <-time.After(2 * retryInterval):
	}
	if err := RemoveMember(t.Context(), m1.cli(t), first); err != nil {
		t.Fatal(err)
	}
	if err := <-added; err != nil {
		t.Fatalf("the second learner's add once the first was gone: %v", err)
	}
	if _, learners := members(t, m1.cli(t)); len(learners) != 1 || learners[0] != m3.peer {
		t.Errorf("learners %v, want m3's %s alone", learners, m3.peer)
	}
}
