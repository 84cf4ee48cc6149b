package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/templates"
)

// A control-plane node rejoins by itself after `etcd restore` on another:
// the restore founds a new etcd cluster, and each other node's member,
// still holding the old cluster's data, is left out of it. When the node's
// join runs again (its bootstrap unit at boot, or `kubeboot join
// --control-plane` by hand), it finds the cluster that is current, sees
// that its data is not of it, moves that data aside and joins as a new
// member. Nobody runs `reset --force` first.

// currentCluster finds, among the join's etcd endpoints, the members this
// node's manifest names (those of the cluster it joined once) and this
// node's own member at self, the cluster that is current (etcd.Newest: a
// restored cluster beats the one it replaced, whose members may still
// answer), and points cli at its endpoints alone. It retries while none
// answers, up to etcdEndpointsWait.
func currentCluster(ctx context.Context, s *JoinNode, cli *clientv3.Client, endpoints []string, self string) (etcd.Current, error) {
	candidates := slices.Clone(endpoints)
	for _, u := range append(etcd.ClientURLsOf(s.Membership.InitialCluster), self) {
		if !slices.Contains(candidates, u) {
			candidates = append(candidates, u)
		}
	}
	var cur etcd.Current
	var last error
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, etcdEndpointsWait, true, func(ctx context.Context) (bool, error) {
		cur, last = etcd.Newest(ctx, cli, candidates)
		return last == nil, nil
	})
	if err != nil {
		if ctx.Err() != nil || last == nil {
			last = err
		}
		return etcd.Current{}, fmt.Errorf("find the cluster's etcd members within %s: %w", etcdEndpointsWait, last)
	}
	for _, ep := range slices.Sorted(maps.Keys(cur.Left)) {
		s.Report.Warnf("etcd at %s answers for cluster %s, which the cluster %s replaced (a restore): it is left out", ep, cur.Left[ep], cur.Cluster)
	}
	cli.SetEndpoints(cur.Endpoints...)
	return cur, nil
}

// leaveOldData readies a node whose etcd data is of a member the current
// cluster cur does not have, restored away or removed, to join as a new
// one: it stops the node's etcd, moves its data dir to EtcdLeftDir and
// forgets the membership the manifest recorded. A node without data, or
// whose member the cluster has, is left as it is. Data of another cluster
// is left only when the node's own member, at self, answered and lost to
// cur: a member that does not answer might hold the newer cluster (this
// node's own restore), so the node waits for it (an error: bootstrap
// retries).
func leaveOldData(ctx context.Context, s *JoinNode, cli *clientv3.Client, cur etcd.Current, self string) error {
	c := s.Config
	dir := c.Etcd.Local.DataDir
	local, ok, err := etcd.DataDirIdentity(s.Files.HostPath(dir))
	if err != nil || !ok {
		return err
	}
	why := fmt.Sprintf("the cluster at %s is %s, made anew or restored from a snapshot since", strings.Join(cur.Endpoints, ","), cur.Cluster)
	if _, lost := cur.Left[self]; local.Cluster != cur.Cluster && !lost {
		return fmt.Errorf("this node's etcd data in %s is of cluster %s, and the cluster at %s is %s; this node's member at %s does not answer, so which of the two is newer cannot be told: "+
			"run again once it answers (see `crictl logs` of etcd)", dir, local.Cluster, strings.Join(cur.Endpoints, ","), cur.Cluster, self)
	}
	if local.Cluster == cur.Cluster {
		has, err := etcd.HasMember(ctx, cli, local.Member)
		if err != nil || has {
			return err
		}
		why = "the cluster removed that member"
	}
	s.Report.Warnf("this node's etcd data in %s is member %s of cluster %s, and %s: the member joins again as a new one; its old data waits in %s until it has",
		dir, local.Member, local.Cluster, why, c.EtcdLeftDir())
	if err := stopLocalEtcd(ctx, s.Node); err != nil {
		return err
	}
	for _, d := range []string{dir, c.EtcdLeftDir()} {
		if err := checkOnlyEtcdData(s.Node, d); err != nil {
			return err
		}
	}
	if err := s.Files.RemoveAll(c.EtcdLeftDir()); err != nil {
		return err
	}
	if err := s.Files.Rename(dir, c.EtcdLeftDir()); err != nil {
		return err
	}
	s.Membership = templates.EtcdMembership{}
	return nil
}

// stopLocalEtcd removes this node's etcd manifest, if any, and waits
// until the kubelet has stopped the member. etcd-join writes the manifest
// anew.
func stopLocalEtcd(ctx context.Context, s *phases.Node) error {
	c := s.Config
	listeners, err := phases.PlannedListeners(s)
	if err != nil {
		return err
	}
	listeners = slices.DeleteFunc(listeners, func(l phases.Listener) bool { return l.Component != config.NameEtcd })
	st := stoppingNow(s, listeners)
	if err := s.Files.Remove(c.ManifestPath(config.NameEtcd)); err != nil {
		return err
	}
	return waitStopped(ctx, s.Run, st, c.Timeouts.ControlPlane.Duration)
}

// removeLeftData removes EtcdLeftDir once the member has joined again,
// unless something etcd did not write came into it: then it stays, and
// the report says so.
func removeLeftData(s *phases.Node) error {
	left := s.Config.EtcdLeftDir()
	if _, err := os.Lstat(s.Files.HostPath(left)); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := checkOnlyEtcdData(s, left); err != nil {
		s.Report.Warnf("left %s, the data of the member this node had before: %v", left, err)
		return nil
	}
	if err := s.Files.RemoveAll(left); err != nil {
		return err
	}
	s.Report.Infof("removed %s, the data of the member this node had before it joined again", left)
	return nil
}

// leftClusterWait bounds how long LeftCluster asks the cluster: at every
// boot of the first node, a cluster that does not answer at once is no
// reason to wait, only to found or converge as before.
const leftClusterWait = 10 * time.Second

// LeftCluster says whether this node, configured to found the cluster (a
// ClusterConfiguration), holds the etcd data of a cluster that another
// control-plane node's restore has replaced: its data dir holds a member,
// its own member answers, and the cluster its admin.conf reaches shows
// etcd members (its etcd pods) of another cluster with a higher revision
// (etcd.Newest). Such a node joins the restored cluster instead of
// founding one. Whatever it cannot find out (no data, no admin.conf, its
// member or the others not answering within leftClusterWait) says no:
// the node converges as it would have.
func LeftCluster(ctx context.Context, s *phases.Node) (bool, error) {
	c := s.Config
	if c.Etcd.Local == nil || s.Options.Offline || s.Options.DryRun {
		return false, nil
	}
	local, ok, err := etcd.DataDirIdentity(s.Files.HostPath(c.Etcd.Local.DataDir))
	if err != nil || !ok {
		return false, err
	}
	kubeconfig, err := s.Files.ReadFile(c.KubeconfigPath(config.KubeconfigAdmin))
	if err != nil {
		return false, nil
	}
	client, err := phases.NewClient(kubeconfig, "")
	if err != nil {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, leftClusterWait)
	defer cancel()
	endpoints, err := etcdEndpointsOfPods(ctx, client, c.Node.Name)
	if err != nil || len(endpoints) == 0 {
		return false, nil
	}
	// This node's member must answer and lose: it may hold the newest
	// cluster itself.
	self := etcd.ClientURL(c)
	endpoints = append(endpoints, self)
	cli, err := etcd.New(ctx, endpoints, etcd.LocalTLS(c, s.Files.HostPath))
	if err != nil {
		return false, nil
	}
	defer func() { _ = cli.Close() }()
	cur, err := etcd.Newest(ctx, cli, endpoints)
	if _, lost := cur.Left[self]; err != nil || !lost || cur.Cluster == local.Cluster {
		return false, nil
	}
	s.Report.Warnf("this node's etcd data in %s is member %s of cluster %s, and the cluster at %s is %s, restored from a snapshot since: "+
		"this node joins it as a control-plane node instead of founding a cluster", c.Etcd.Local.DataDir, local.Member, local.Cluster, strings.Join(cur.Endpoints, ","), cur.Cluster)
	return true, nil
}
