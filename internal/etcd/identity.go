package etcd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
)

// Identity is whose an etcd member is: its own ID and its cluster's.
type Identity struct {
	Member  MemberID
	Cluster MemberID
}

// DataDirIdentity reads whose data the etcd data dir at dir (a host path)
// holds, from the metadata record that begins each file of its
// write-ahead log; etcd never changes either ID of a data dir. ok is false
// when dir holds no WAL: no member has started there. It reads without
// the WAL's lock, so a member that runs there may go on.
func DataDirIdentity(dir string) (id Identity, ok bool, err error) {
	walDir := filepath.Join(dir, "member", "wal")
	entries, err := os.ReadDir(walDir)
	if errors.Is(err, fs.ErrNotExist) {
		return Identity{}, false, nil
	}
	if err != nil {
		return Identity{}, false, fmt.Errorf("read etcd WAL dir %q: %w", walDir, err)
	}
	// The newest file: etcd removes old ones as it takes snapshots.
	var newest string
	for _, e := range slices.Backward(entries) {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".wal") {
			newest = e.Name()
			break
		}
	}
	if newest == "" {
		return Identity{}, false, nil
	}
	path := filepath.Join(walDir, newest)
	f, err := os.Open(path)
	if err != nil {
		return Identity{}, false, fmt.Errorf("read etcd WAL %q: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	dec := wal.NewDecoder(fileutil.NewFileReader(f))
	for {
		var rec walpb.Record
		if err := dec.Decode(&rec); err != nil {
			return Identity{}, false, fmt.Errorf("read etcd WAL %q: no member metadata in it: %w", path, err)
		}
		switch rec.Type {
		case wal.CrcType:
			// The CRC the file's records continue from.
			dec.UpdateCRC(rec.Crc)
		case wal.MetadataType:
			var m etcdserverpb.Metadata
			if err := m.Unmarshal(rec.Data); err != nil {
				return Identity{}, false, fmt.Errorf("read etcd WAL %q: its member metadata: %w", path, err)
			}
			return Identity{Member: MemberID(m.NodeID), Cluster: MemberID(m.ClusterID)}, true, nil
		}
	}
}

// Current is the etcd cluster that endpoints answer for, when more than
// one does: the endpoints of the newest, and those left of another.
type Current struct {
	// Cluster is the newest cluster's ID and Revision its store's.
	Cluster  MemberID
	Revision int64
	// Endpoints answer for it.
	Endpoints []string
	// Left are the endpoints that answer for another cluster, each with
	// its cluster's ID: members a restore left behind.
	Left map[string]MemberID
}

// Newest asks each endpoint, at the same time, for its member's status,
// which a member gives without a quorum, and returns the cluster with the
// highest revision. A restore founds a new cluster whose revision moves on
// by RestoreRevisionBump past its snapshot's, so the members it left
// behind, which may still answer and even form a quorum of their own,
// lose to it. An endpoint that does not answer counts for neither; when
// none answers, Newest fails.
func Newest(ctx context.Context, cli *clientv3.Client, endpoints []string) (Current, error) {
	answers := make([]statusAnswer, len(endpoints))
	var wg sync.WaitGroup
	for i, ep := range endpoints {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, statusTimeout)
			defer cancel()
			answers[i].resp, answers[i].err = cli.Status(sctx, ep)
		})
	}
	wg.Wait()
	var cur Current
	var problems []string
	for i, a := range answers {
		if a.err != nil {
			problems = append(problems, endpoints[i]+": "+a.err.Error())
			continue
		}
		if rev := a.resp.Header.Revision; cur.Endpoints == nil || rev > cur.Revision {
			cur.Cluster, cur.Revision = MemberID(a.resp.Header.ClusterId), rev
			cur.Endpoints = []string{}
		}
	}
	if cur.Endpoints == nil {
		return Current{}, fmt.Errorf("no etcd member answers: %s", strings.Join(problems, "; "))
	}
	for i, a := range answers {
		switch {
		case a.err != nil:
		case MemberID(a.resp.Header.ClusterId) == cur.Cluster:
			cur.Endpoints = append(cur.Endpoints, endpoints[i])
		default:
			if cur.Left == nil {
				cur.Left = map[string]MemberID{}
			}
			cur.Left[endpoints[i]] = MemberID(a.resp.Header.ClusterId)
		}
	}
	return cur, nil
}

// HasMember says whether the cluster behind cli has member id.
func HasMember(ctx context.Context, cli *clientv3.Client, id MemberID) (bool, error) {
	list, err := memberList(ctx, cli)
	if err != nil {
		return false, fmt.Errorf("list etcd members through %s: %w", strings.Join(cli.Endpoints(), ","), err)
	}
	return slices.ContainsFunc(list.Members, func(m *etcdserverpb.Member) bool { return MemberID(m.ID) == id }), nil
}
