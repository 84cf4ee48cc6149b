package app

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/etcd/etcdtest"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/snapshot"
	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// snapshotResult runs a command with -o json and returns its result.
func snapshotResult(t *testing.T, args ...string) (int, snapshot.SaveResult, string) {
	t.Helper()
	code, stdout, stderr := runCLI(t, append(args, "-o", "json")...)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var out struct {
		Result snapshot.SaveResult `json:"result"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &out); err != nil {
		t.Fatalf("%v: no result in %q (stderr %q)", args, stdout, stderr)
	}
	return code, out.Result, stdout + stderr
}

// etcdNode is node-1 on a throw-away root with kubeboot's PKI and a real
// etcd member serving it: the root, the node's configuration file, the
// member's client URL and the API server's client certificate for it.
func etcdNode(t *testing.T) (root, cfg, endpoint string, tlsFiles etcd.TLSFiles) {
	t.Helper()
	etcdtest.Binary(t)
	root = t.TempDir()
	cfg = writeFile(t, t.TempDir(), "node.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nnode: {name: node-1, advertiseAddress: 127.0.0.1}\n")
	if code, _, stderr := runCLI(t, "init", "phase", "certs", "--config", cfg, "--root", root); code != 0 {
		t.Fatalf("certs: %s", stderr)
	}
	endpoint = etcdtest.Start(t, filepath.Join(root, "etc", "kubernetes", "pki", "etcd"))
	pki := filepath.Join(root, "etc", "kubernetes", "pki")
	return root, cfg, endpoint, etcd.TLSFiles{CA: filepath.Join(pki, "etcd", "ca.crt"),
		Cert: filepath.Join(pki, "apiserver-etcd-client.crt"), Key: filepath.Join(pki, "apiserver-etcd-client.key")}
}

// TestEtcdSnapshotSaveListPrune saves snapshots of a real etcd with TLS
// from kubeboot's PKI and reads back their revision and keys, lists them,
// and prunes them; an etcd that does not answer is exit 1, and a
// configuration without a local etcd exit 2.
func TestEtcdSnapshotSaveListPrune(t *testing.T) {
	root, cfg, endpoint, tlsFiles := etcdNode(t)
	rev := etcdtest.PutKeys(t, endpoint, tlsFiles, 20)

	save := []string{"etcd", "snapshot", "save", "--config", cfg, "--root", root, "--endpoint", endpoint}
	code, res, out := snapshotResult(t, save...)
	dir := filepath.Join(root, "var", "lib", "kubeboot", "etcd-snapshots")
	snap := res.Snapshot
	if code != 0 || !res.OK || snap == nil {
		t.Fatalf("save: code %d, %s", code, out)
	}
	if snap.Revision != rev || snap.Keys != 19 || filepath.Dir(snap.Path) != dir || time.Since(snap.Time) > time.Minute {
		t.Errorf("snapshot %+v, want revision %d and 19 keys in %s", snap, rev, dir)
	}
	if st, err := os.Stat(snap.Path); err != nil || st.Size() != snap.Size || st.Mode().Perm() != 0o600 {
		t.Errorf("snapshot file: %v, %v", st, err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("snapshot dir: %v, %v", st, err)
	}
	first := filepath.Base(snap.Path)

	// --out names the file; its name is not kubeboot's, so it is not listed.
	other := filepath.Join(t.TempDir(), "mine.db")
	if code, res, out := snapshotResult(t, append(save, "--out", other)...); code != 0 || res.Snapshot == nil || res.Snapshot.Path != other {
		t.Fatalf("save --out: code %d, %s", code, out)
	}
	time.Sleep(2 * time.Millisecond) // names are to the millisecond
	if code, _, out := snapshotResult(t, save...); code != 0 {
		t.Fatalf("second save: code %d, %s", code, out)
	}

	code, stdout, stderr := runCLI(t, "etcd", "snapshot", "list", "--config", cfg, "--root", root, "-o", "json")
	var listing snapshot.Listing
	if code != 0 || json.Unmarshal([]byte(stdout), &listing) != nil || len(listing.Snapshots) != 2 || listing.Schedule != nil {
		t.Fatalf("list: code %d, %q, %q", code, stdout, stderr)
	}
	list := listing.Snapshots
	if list[1].Name != first || !list[0].Verified || !list[1].Verified || list[0].Keys != 19 {
		t.Errorf("list: %+v", list)
	}

	prune := []string{"etcd", "snapshot", "prune", "--config", cfg, "--root", root, "--keep", "1"}
	if code, res, out := snapshotResult(t, prune...); code != 0 || !res.OK {
		t.Fatalf("prune: code %d, %s", code, out)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 || entries[0].Name() != list[0].Name {
		t.Errorf("after prune --keep 1: %v, want only %s", entries, list[0].Name)
	}

	if code, res, out := snapshotResult(t, "etcd", "snapshot", "save", "--config", cfg, "--root", root, "--endpoint", fmt.Sprintf("https://127.0.0.1:%d", testsupport.FreePort(t))); code != 1 || !strings.Contains(res.Error, "does not answer") {
		t.Errorf("save from no etcd: code %d, %s", code, out)
	}
	external := writeFile(t, t.TempDir(), "external.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\n"+
		"etcd: {external: {endpoints: [https://10.0.0.2:2379], caFile: /etc/e/ca.crt, certFile: /etc/e/c.crt, keyFile: /etc/e/c.key}}\n")
	if code, _, stderr := runCLI(t, "etcd", "snapshot", "list", "--config", external); code != 2 || !strings.Contains(stderr, "etcd.external") {
		t.Errorf("external etcd: code %d, %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, append(prune[:len(prune)-1], "0")...); code != 2 || !strings.Contains(stderr, "--keep 0") {
		t.Errorf("--keep 0: code %d, %q", code, stderr)
	}
}

// TestCheckEndpoint: --endpoint takes a client URL as etcd's own flags
// do; anything else is a usage error naming the flag, which never quotes
// a password.
func TestCheckEndpoint(t *testing.T) {
	for _, tc := range []struct {
		endpoint string
		ok       bool
	}{
		{"", true},
		{"https://10.0.0.10:2379", true},
		{"http://127.0.0.1:2379/", true},
		{"https://[fd00::10]:2379", true},
		{"https://etcd.example.com:2379", true},
		{"not a url", false},
		{"http://", false},
		{"https://host:99999", false},
		{"https://host:0", false},
		{"https://10.0.0.10", false},
		{"10.0.0.10:2379", false},
		{"unix:///run/etcd.sock", false},
		{"https://10.0.0.10:2379/v3", false},
		{"https://10.0.0.10:2379?a=b", false},
		{"https://root:s3cr3t@10.0.0.10:2379", false},
	} {
		err := checkEndpoint(tc.endpoint)
		switch {
		case tc.ok && err != nil:
			t.Errorf("%q: %v", tc.endpoint, err)
		case !tc.ok && (exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), "--endpoint") || !strings.Contains(err.Error(), "like https://10.0.0.10:2379")):
			t.Errorf("%q: %v, want a usage error naming --endpoint and the fix", tc.endpoint, err)
		case err != nil && strings.Contains(err.Error(), "s3cr3t"):
			t.Errorf("%q: the password is quoted: %v", tc.endpoint, err)
		}
	}
}

// TestEtcdFlagMistakes: a snapshot --out in a directory that does not
// exist and an --endpoint that is no client URL are usage errors
// (exit 2) naming the flag, before any etcd is dialed, in every command
// that takes them.
func TestEtcdFlagMistakes(t *testing.T) {
	root, dir := t.TempDir(), t.TempDir()
	cfg := writeFile(t, dir, "node.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nnode: {name: node-1, advertiseAddress: 127.0.0.1}\n")
	node := []string{"--config", cfg, "--root", root}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"etcd", "snapshot", "save", "--out", filepath.Join(dir, "missing", "s.db")}, "--out " + filepath.Join(dir, "missing", "s.db") + ": the directory " + filepath.Join(dir, "missing") + " does not exist: create it first"},
		{[]string{"etcd", "snapshot", "save", "--endpoint", "not a url"}, `--endpoint "not a url": not an etcd client URL`},
		{[]string{"etcd", "members", "--endpoint", "http://"}, `--endpoint "http://": not an etcd client URL`},
		{[]string{"etcd", "members", "list", "--endpoint", "https://host:99999"}, `--endpoint "https://host:99999"`},
		{[]string{"etcd", "members", "remove", "node-2", "--endpoint", "https://host:99999"}, `--endpoint "https://host:99999"`},
	} {
		start := time.Now()
		code, _, stderr := runCLI(t, append(tc.args, node...)...)
		if code != exit.Usage || !strings.Contains(stderr, tc.want) || time.Since(start) > time.Second {
			t.Errorf("%v: exit %d after %s, %q; want exit 2 at once and %q", tc.args, code, time.Since(start), stderr, tc.want)
		}
	}
	schedule := scheduleOptions{endpoint: "not a url", tls: etcd.TLSFiles{CA: "ca.crt", Cert: "c.crt", Key: "c.key"},
		dir: config.DefaultEtcdSnapshotsDir, interval: config.DefaultSnapshotInterval, keep: 1, healthPort: config.PortEtcdSnapshots}
	if err := schedule.check(); exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), `--endpoint "not a url"`) {
		t.Errorf("schedule --endpoint 'not a url': %v", err)
	}
}
