package app

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/etcd/etcdtest"
)

// TestEtcdMembersUsage: a mistake on the command line, or a configuration
// without a local etcd, is a usage error (exit 2) before any etcd is asked.
func TestEtcdMembersUsage(t *testing.T) {
	external := writeFile(t, t.TempDir(), "external.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\n"+
		"etcd: {external: {endpoints: [https://10.0.0.2:2379], caFile: /etc/e/ca.crt, certFile: /etc/e/c.crt, keyFile: /etc/e/c.key}}\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"etcd", "members", "nope"}, "kubeboot etcd members takes no arguments, or a subcommand: list or remove"},
		{[]string{"etcd", "members", "list", "extra"}, "kubeboot etcd members list takes no arguments"},
		{[]string{"etcd", "members", "remove"}, "etcd members remove takes the NAME of one member (got 0 arguments)"},
		{[]string{"etcd", "members", "remove", "a", "b"}, "takes the NAME of one member (got 2 arguments)"},
		{[]string{"etcd", "members", "--config", external}, "etcd.external: kubeboot manages the cluster of the etcd member it runs"},
		{[]string{"etcd", "members", "remove", "node-2", "--config", external}, "etcd.external"},
	} {
		if code, _, stderr := runCLI(t, tc.args...); code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}

// TestEtcdMembersOutput: -o json is one object whose fields are the
// documented ones, IDs in hex; the table shows each member and the alarms.
func TestEtcdMembersOutput(t *testing.T) {
	list := etcd.MemberList{
		Members: []etcd.MemberStatus{
			{Name: "cp-1", ID: 0xa1, PeerURLs: []string{"https://10.0.0.1:2380"}, ClientURLs: []string{"https://10.0.0.1:2379"},
				Leader: true, Healthy: true, Errors: []string{}, Version: "3.6.8", DBSize: 3 << 20, DBSizeInUse: 1 << 20, RaftIndex: 42, RaftTerm: 3},
			{Name: "cp-2", ID: 0xb2, PeerURLs: []string{"https://10.0.0.2:2380"}, ClientURLs: []string{"https://10.0.0.2:2379"},
				Problem: "no status answer", Errors: []string{}},
			{ID: 0xc3, PeerURLs: []string{"https://10.0.0.3:2380"}, ClientURLs: []string{}, Learner: true, Problem: "no client URL", Errors: []string{}},
		},
		Alarms: []etcd.Alarm{{MemberID: 0xa1, Member: "cp-1", Alarm: "NOSPACE"}},
	}
	var out bytes.Buffer
	if err := printMembers(&out, list, true); err != nil {
		t.Fatal(err)
	}
	var got map[string][]map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("not one JSON object: %v\n%s", err, out.String())
	}
	wantKeys := map[string][]string{
		"members": {"clientURLs", "dbSize", "dbSizeInUse", "errors", "healthy", "id", "leader", "learner", "name", "peerURLs", "raftIndex", "raftTerm", "version"},
		"alarms":  {"alarm", "member", "memberID"},
	}
	if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, []string{"alarms", "members"}) {
		t.Errorf("top-level keys %v", keys)
	}
	for field, want := range wantKeys {
		if keys := slices.Sorted(maps.Keys(got[field][0])); !slices.Equal(keys, want) {
			t.Errorf("%s[0] keys %v, want %v", field, keys, want)
		}
	}
	if m := got["members"][0]; m["id"] != "a1" || m["dbSize"] != float64(3<<20) || m["leader"] != true {
		t.Errorf("members[0]: %v", m)
	}
	if m := got["members"][1]; m["problem"] != "no status answer" || m["healthy"] != false {
		t.Errorf("members[1]: %v", m)
	}
	if a := got["alarms"][0]; a["memberID"] != "a1" || a["alarm"] != "NOSPACE" {
		t.Errorf("alarms[0]: %v", a)
	}

	out.Reset()
	if err := printMembers(&out, list, false); err != nil {
		t.Fatal(err)
	}
	// The columns, with their padding as one space.
	var rows []string
	for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		rows = append(rows, strings.Join(strings.Fields(line), " "))
	}
	want := []string{
		"NAME ID ROLE LEADER HEALTH DB SIZE IN USE RAFT INDEX RAFT TERM CLIENT URLS PEER URLS",
		"cp-1 a1 voter * healthy 3.0 MiB 1.0 MiB 42 3 https://10.0.0.1:2379 https://10.0.0.1:2380",
		"cp-2 b2 voter unhealthy: no status answer - - - - https://10.0.0.2:2379 https://10.0.0.2:2380",
		"(unstarted) c3 learner unhealthy: no client URL - - - - https://10.0.0.3:2380",
		"alarm: NOSPACE on member cp-1 (a1)",
	}
	if !slices.Equal(rows, want) {
		t.Errorf("table:\n%s\nwant (padding aside):\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	list.Alarms, list.AlarmsError = []etcd.Alarm{}, "etcdserver: no leader"
	out.Reset()
	if err := printMembers(&out, list, false); err != nil || !strings.HasSuffix(out.String(), "alarms: unknown (etcdserver: no leader)\n") {
		t.Errorf("alarms not read: %v\n%s", err, out.String())
	}
}

// TestEtcdMembersListAndRefusals lists the members of a real etcd with TLS
// from kubeboot's PKI, and refuses to remove this node's own member and a
// member that does not exist (exit 2), changing nothing.
func TestEtcdMembersListAndRefusals(t *testing.T) {
	root, cfg, endpoint, tlsFiles := etcdNode(t)
	etcdtest.PutKeys(t, endpoint, tlsFiles, 1)
	flags := []string{"--config", cfg, "--root", root, "--endpoint", endpoint}

	code, stdout, stderr := runCLI(t, append([]string{"etcd", "members", "list", "-o", "json"}, flags...)...)
	var list etcd.MemberList
	if code != 0 || json.Unmarshal([]byte(stdout), &list) != nil || len(list.Members) != 1 {
		t.Fatalf("list: exit %d, %q, %q", code, stdout, stderr)
	}
	if m := list.Members[0]; m.Name != "node-1" || !m.Healthy || !m.Leader || m.Learner || m.DBSize <= 0 || !slices.Equal(m.ClientURLs, []string{endpoint}) {
		t.Errorf("member: %+v", m)
	}
	// `members` alone lists, as a table.
	if code, stdout, stderr := runCLI(t, append([]string{"etcd", "members"}, flags...)...); code != 0 || !strings.Contains(stdout, "node-1") || !strings.Contains(stdout, "healthy") || !strings.Contains(stdout, "alarms: none") {
		t.Errorf("members: exit %d, %q, %q", code, stdout, stderr)
	}

	for name, want := range map[string]string{
		"node-1": "this node's own member: run `kubeboot reset` on this node instead",
		"ghost":  `etcd member "ghost": the cluster has no member of that name (its members: node-1)`,
	} {
		code, res, out := snapshotResult(t, append([]string{"etcd", "members", "remove", name}, flags...)...)
		if code != 2 || res.OK || res.ExitCode != 2 || !strings.Contains(res.Error, want) || !slices.Equal(res.Phases, []string{}) {
			t.Errorf("remove %s: exit %d, %+v, want %q\n%s", name, code, res, want, out)
		}
	}
}
