package controlplane

import (
	"bytes"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/templates"
)

// localURL is an http URL on a free loopback port.
func localURL(t *testing.T) url.URL {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer func() { _ = l.Close() }()
	return url.URL{Scheme: "http", Host: l.Addr().String()}
}

// startEmbeddedEtcd runs the member name over plain HTTP on loopback in
// dir, at peer, until the test's end, and returns a client of it. A dir
// that a restore wrote starts the cluster the restore made.
func startEmbeddedEtcd(t *testing.T, name, dir string, peer url.URL) *clientv3.Client {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = name, dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	client := localURL(t)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = name + "=" + peer.String()
	e, err := embed.StartEtcd(cfg)
	must(t, err)
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatalf("etcd in %s did not become ready", dir)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client.String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	must(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// saveSnapshot writes the snapshot of the member behind cli to a file.
func saveSnapshot(t *testing.T, cli *clientv3.Client) string {
	t.Helper()
	stream, err := cli.Snapshot(t.Context())
	must(t, err)
	defer func() { _ = stream.Close() }()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(stream)
	must(t, err)
	path := filepath.Join(t.TempDir(), "snapshot.db")
	must(t, os.WriteFile(path, buf.Bytes(), 0o600))
	return path
}

// TestRejoinLeavesTheOldClustersData: a node whose etcd data is of the
// cluster a restore on another node replaced finds the restored cluster,
// though its own member still answers for the old one, moves its data
// aside, drops its etcd manifest and the membership the manifest recorded,
// and says why; once it has joined again, the old data goes. While its
// member does not answer, nothing moves; a node whose member the cluster
// has is left alone, and data with a file etcd did not write is refused,
// moving nothing.
func TestRejoinLeavesTheOldClustersData(t *testing.T) {
	s := initialisedWith(t, func(c *config.ClusterConfiguration) {
		// A loopback address no test listens on: stopping etcd waits
		// until nothing answers at its addresses.
		c.Node.AdvertiseAddress = "127.0.0.94"
		c.Timeouts.ControlPlane.Duration = 5 * time.Second
	})
	s.Options.Offline = false
	var out bytes.Buffer
	s.Report = output.NewReporter(&out, false)
	c := s.Config
	ctx := t.Context()
	data := s.Files.HostPath(c.Etcd.Local.DataDir)

	// This node's member, in the cluster before the restore, which comes
	// back with the node.
	oldCli := startEmbeddedEtcd(t, c.Node.Name, data, localURL(t))
	self := oldCli.Endpoints()[0]
	_, err := oldCli.Put(ctx, "/registry/kept", "v1")
	must(t, err)
	before, _, err := etcd.DataDirIdentity(data)
	must(t, err)
	snapshot := saveSnapshot(t, oldCli)

	// Another node restores the snapshot: a new cluster of one.
	peer := localURL(t)
	restoredDir := filepath.Join(t.TempDir(), "restored")
	must(t, etcd.Restore(ctx, snapshot, restoredDir, "cp1", peer.String()))
	cli := startEmbeddedEtcd(t, "cp1", restoredDir, peer)
	restored, _, err := etcd.DataDirIdentity(restoredDir)
	must(t, err)

	j := &JoinNode{Node: s}
	s.Membership = templates.EtcdMembership{InitialCluster: c.Node.Name + "=https://127.0.0.94:2380,cp1=https://127.0.0.95:2380"}
	cur, err := currentCluster(ctx, j, cli, cli.Endpoints(), self)
	must(t, err)
	if cur.Cluster != restored.Cluster || cur.Left[self] != before.Cluster {
		t.Fatalf("current cluster %+v, want the restored %s, and this node's member left of %s", cur, restored.Cluster, before.Cluster)
	}

	// While this node's member does not answer, which cluster is newer
	// cannot be told: nothing moves.
	gone := "http://" + localURL(t).Host
	unknown, err := currentCluster(ctx, j, cli, cli.Endpoints(), gone)
	must(t, err)
	if err := leaveOldData(ctx, j, cli, unknown, gone); err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("leaving data while this node's member does not answer: %v", err)
	}
	if _, err := os.Stat(filepath.Join(data, "member")); err != nil {
		t.Fatalf("the data moved: %v", err)
	}

	// Data etcd did not write is refused, and nothing moves.
	foreign := filepath.Join(data, "notes.txt")
	must(t, os.WriteFile(foreign, []byte("mine"), 0o600))
	if err := leaveOldData(ctx, j, cli, cur, self); exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), "notes.txt") {
		t.Fatalf("leaving data with a file of the user's: %v, want a usage error naming it", err)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Fatalf("the user's file: %v", err)
	}
	must(t, os.Remove(foreign))

	must(t, leaveOldData(ctx, j, cli, cur, self))
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("the data dir is still there: %v", err)
	}
	if left, _, err := etcd.DataDirIdentity(s.Files.HostPath(c.EtcdLeftDir())); err != nil || left != before {
		t.Errorf("%s holds %+v (%v), want the old member %+v", c.EtcdLeftDir(), left, err, before)
	}
	if _, err := os.Stat(s.Files.HostPath(c.ManifestPath(config.NameEtcd))); !os.IsNotExist(err) {
		t.Errorf("the old member's manifest is still there: %v", err)
	}
	if s.Membership.InitialCluster != "" {
		t.Errorf("the old membership is kept: %q", s.Membership.InitialCluster)
	}
	want := "member " + before.Member.String() + " of cluster " + before.Cluster.String()
	if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), restored.Cluster.String()) {
		t.Errorf("the report does not say %q and name the cluster %s:\n%s", want, restored.Cluster, out.String())
	}

	// The member joined again: its old data goes.
	must(t, removeLeftData(s))
	if _, err := os.Stat(s.Files.HostPath(c.EtcdLeftDir())); !os.IsNotExist(err) {
		t.Errorf("%s is still there after the rejoin: %v", c.EtcdLeftDir(), err)
	}

	// The restored member's own node: its member is the cluster's.
	own := initialisedWith(t, func(c *config.ClusterConfiguration) { c.Node.AdvertiseAddress = "127.0.0.95" })
	must(t, os.Remove(own.Files.HostPath(own.Config.Etcd.Local.DataDir)))
	must(t, os.Symlink(restoredDir, own.Files.HostPath(own.Config.Etcd.Local.DataDir)))
	manifest := own.Files.HostPath(own.Config.ManifestPath(config.NameEtcd))
	if err := leaveOldData(ctx, &JoinNode{Node: own}, cli, cur, cli.Endpoints()[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(manifest); err != nil {
		t.Errorf("a member of the cluster lost its manifest: %v", err)
	}
	if _, err := os.Stat(filepath.Join(restoredDir, "member")); err != nil {
		t.Errorf("a member of the cluster lost its data: %v", err)
	}
}
