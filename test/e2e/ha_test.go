//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/bootstrap"
	bundlepkg "github.com/kubeboot/kubeboot/internal/bundle"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/s3store/s3test"
	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// haConfig writes the node's config for the HA cluster: a ClusterConfiguration
// for the first node, a JoinConfiguration through etcdEndpoints for the
// others; each node takes a scheduled snapshot every minute and copies it
// to bucket under ha/<node name>/; extra are more fields.
func (n *node) haConfig(t *testing.T, endpoint string, etcdEndpoints []string, bucket config.S3Storage, extra map[string]any) {
	t.Helper()
	// The bucket's files, where the machine reads them.
	for _, f := range []*string{&bucket.CredentialsFile, &bucket.CAFile} {
		dst := filepath.Join(n.root, "s3-"+filepath.Base(*f))
		writeFile(t, dst, string(readFile(t, *f)))
		*f = dst
	}
	edits := map[string]any{
		"controlPlaneEndpoint":    endpoint,
		"etcd.local.snapshotsDir": n.path("etcd-snapshots"),
		// After the restore, this node's kubelet, whose API server is
		// gone, took 55 s to 2m8s to start the same static pods again.
		"timeouts.controlPlane": "5m",
		"etcd.local.scheduledSnapshots": map[string]any{"interval": "1m", "keep": 3, "s3": map[string]any{
			"endpoint": bucket.Endpoint, "bucket": bucket.Bucket, "prefix": "ha/", "credentialsFile": bucket.CredentialsFile, "caFile": bucket.CAFile,
		}},
	}
	maps.Copy(edits, extra)
	if etcdEndpoints != nil {
		edits["kind"] = "JoinConfiguration"
		edits["join.etcdEndpoints"] = etcdEndpoints
	}
	n.config = n.writeConfig(t, "kubeboot.yaml", edits)
}

// give copies a file of the host into the node's root, where its machine
// sees it, as an operator copies the cluster's bundle to a node, and
// returns the copy's path.
func (n *node) give(t *testing.T, path string) string {
	t.Helper()
	dst := filepath.Join(n.root, filepath.Base(path))
	writeFile(t, dst, string(readFile(t, path)))
	return dst
}

// etcdctl runs etcdctl against endpoints with the node's API server etcd client certificate.
func (n *node) etcdctl(t *testing.T, endpoints []string, args ...string) result {
	t.Helper()
	base := []string{"--endpoints", strings.Join(endpoints, ","),
		"--cacert", n.path("pki/etcd/ca.crt"), "--cert", n.path("pki/apiserver-etcd-client.crt"), "--key", n.path("pki/apiserver-etcd-client.key")}
	return n.inNetns(t, filepath.Join(binDir, "etcdctl"), append(base, args...)...)
}

// etcdMembers returns the names of the voting members and of the learners.
func (n *node) etcdMembers(t *testing.T, endpoints []string) (voters, learners []string) {
	t.Helper()
	r := n.etcdctl(t, endpoints, "member", "list", "-w", "json")
	if r.code != 0 {
		t.Fatalf("etcdctl member list: %s", r.stderr)
	}
	var list struct {
		Members []struct {
			Name      string `json:"name"`
			IsLearner bool   `json:"isLearner"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatal(err)
	}
	for _, m := range list.Members {
		if m.IsLearner {
			learners = append(learners, m.Name)
		} else {
			voters = append(voters, m.Name)
		}
	}
	return voters, learners
}

func etcdURL(addr string) string { return "https://" + addr + ":2379" }

// TestHAControlPlane brings up three control-plane machines behind haproxy
// on the lab's hub, with an S3 server there: the first with init, which
// uploads the cluster secrets with a certificate key; the second joins
// with a certificate bundle, the third with the certificate key and init's
// bootstrap token. A fourth machine is the join that fails.
func TestHAControlPlane(t *testing.T) {
	alongside(t)
	nodes := newNodes(t, "ha", "10.89.27.0/24", nil, "ha1", "ha2", "ha3", "ha4")
	nodes, broken := nodes[:3], nodes[3]
	first := nodes[0]
	// The lab's load balancer, in the hub, round-robins over the API
	// servers of the lab's three control-plane nodes, e2e-ha1 to e2e-ha3, each
	// checked on /readyz.
	hub := first.lab.Hub()
	endpoint := first.lab.Endpoint().String()
	bucket := s3test.Start(t, s3test.Options{
		Address: first.lab.HubAddress().String(), Netns: hub,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var conn net.Conn
			err := inNetns(filepath.Join("/run/netns", hub), func() error {
				var err error
				conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		},
	}).Storage
	r := first.kubeboot(t, "certs", "certificate-key")
	certKey := strings.TrimSpace(r.stdout)
	if r.code != 0 || len(certKey) != 64 {
		t.Fatalf("certs certificate-key: exit %d, %q, %s", r.code, r.stdout, r.stderr)
	}
	first.haConfig(t, endpoint, nil, bucket, map[string]any{"certificateKey": certKey})
	start := time.Now()
	r = first.up(t)
	_, res, err := parseJSONOutput(r.stdout)
	if r.code != 0 || err != nil {
		t.Fatalf("init on %s exited %d (%v):\n%s", first.name, r.code, err, r.stderr)
	}
	if strings.Contains(r.stdout+r.stderr, certKey) {
		t.Error("init printed the certificate key")
	}
	joinArgs := strings.Fields(res.JoinCommand)
	if len(joinArgs) != 7 || joinArgs[3] != "--token" || joinArgs[5] != "--discovery-token-ca-cert-hash" {
		t.Fatalf("init's join command %q, want kubeboot join ENDPOINT --token T --discovery-token-ca-cert-hash H", res.JoinCommand)
	}
	t.Logf("TIMING: first node up (init): %s", time.Since(start).Round(time.Millisecond))
	// haproxy's check needs a moment to see the first API server ready.
	eventually(t, "the load balancer serves node 1's API server", func() error {
		_, err := first.kubectlErr(t, "get", "--raw", "/readyz")
		return err
	})

	// The bundle and its key travel separately: never in one directory.
	bundle := filepath.Join(first.root, "secrets.bundle")
	r = first.kubeboot(t, "certs", "export", "--config", first.config, "--out", bundle)
	if r.code != 0 {
		t.Fatalf("certs export: %s", r.stderr)
	}
	keyText := strings.TrimSpace(r.stdout)
	if strings.Contains(r.stderr, keyText) {
		t.Error("certs export printed the key on stderr")
	}

	var endpoints []string
	for i, n := range nodes {
		endpoints = append(endpoints, etcdURL(n.addr))
		if i == 0 {
			continue
		}
		keyFile := filepath.Join(n.root, "bundle.key")
		if err := os.WriteFile(keyFile, []byte(keyText+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		secrets := []string{"--certs-bundle", n.give(t, bundle), "--key-file", keyFile}
		var extra map[string]any
		if i == 2 {
			// The third node brings nothing but its file: the certificate
			// key and init's token fetch the secrets from kubeadm-certs.
			secrets = nil
			extra = map[string]any{"join.certificateKey": certKey, "join.discovery": map[string]any{
				"apiServerEndpoint": joinArgs[2], "token": joinArgs[4], "caCertHashes": []any{joinArgs[6]}}}
		}
		n.haConfig(t, endpoint, endpoints[:i], bucket, extra)
		joinStart := time.Now()
		r := n.join(t, secrets...)
		if r.code != 0 {
			t.Fatalf("join --control-plane on %s exited %d:\n%s\n%s", n.name, r.code, r.stderr, testsupport.LastLines(r.stdout, 30))
		}
		t.Logf("TIMING: join of %s: %s", n.name, time.Since(joinStart).Round(time.Millisecond))
		if i == 2 && !strings.Contains(r.stdout, "files of the cluster secrets from Secret kube-system/kubeadm-certs") {
			t.Errorf("the join of %s did not fetch the secrets from kubeadm-certs:\n%s", n.name, testsupport.LastLines(r.stdout, 30))
		}
		// The wait phase reports the etcd cluster it joined.
		wantSummary := fmt.Sprintf("etcd cluster: %d members, leader ", i+1)
		if !strings.Contains(r.stdout, wantSummary) || !strings.Contains(r.stdout, "learners: none") {
			t.Errorf("join of %s did not report %q and no learners:\n%s", n.name, wantSummary, testsupport.LastLines(r.stdout, 12))
		}
		voters, learners := first.etcdMembers(t, endpoints)
		if len(voters) != i+1 || len(learners) != 0 {
			t.Fatalf("after joining %s: voters %v, learners %v", n.name, voters, learners)
		}
	}
	t.Logf("TIMING: three-node bring-up: %s", time.Since(start).Round(time.Millisecond))

	t.Run("all 12 components run, every API server answers", func(t *testing.T) {
		for _, n := range nodes {
			if pids := n.componentPids(); len(pids) != len(components) {
				t.Errorf("%s runs %v, want all of %v", n.name, pids, components)
			}
			server := "https://" + n.addr + ":6443"
			if out, err := n.kubectlErr(t, "--server", server, "get", "--raw", "/readyz"); err != nil || out != "ok" {
				t.Errorf("%s /readyz: %q, %v", server, out, err)
			}
		}
	})

	t.Run("etcd members list shows three healthy voters and one leader", func(t *testing.T) {
		r := first.kubeboot(t, "etcd", "members", "list", "--config", first.config, "-o", "json")
		var list etcd.MemberList
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil {
			t.Fatalf("etcd members list: exit %d, %q, %s", r.code, r.stdout, r.stderr)
		}
		var names, leaders []string
		for _, m := range list.Members {
			names = append(names, m.Name)
			if m.Leader {
				leaders = append(leaders, m.Name)
			}
			if m.Learner || !m.Healthy || m.DBSize <= 0 {
				t.Errorf("member %+v, want a healthy voter with a database", m)
			}
		}
		if !slices.Equal(names, []string{nodes[0].name, nodes[1].name, nodes[2].name}) || len(leaders) != 1 || len(list.Alarms) != 0 {
			t.Errorf("members %v, leaders %v, alarms %v; want the three nodes, one leader, no alarm", names, leaders, list.Alarms)
		}
	})

	t.Run("a restore is refused while the other members answer", func(t *testing.T) {
		r := first.kubeboot(t, "etcd", "snapshot", "save", "--config", first.config, "-o", "json")
		_, res, err := parseJSONOutput(r.stdout)
		if r.code != 0 || err != nil || res.Snapshot == nil {
			t.Fatalf("etcd snapshot save: exit %d, %v: %s", r.code, err, r.stderr)
		}
		pids := first.componentPids()
		r = first.kubeboot(t, "etcd", "restore", "--snapshot", res.Snapshot.Path, "--config", first.config)
		if r.code != 2 || !strings.Contains(r.stderr, nodes[1].name) || !strings.Contains(r.stderr, "still answer") {
			t.Errorf("restore beside two running members: exit %d: %s", r.code, r.stderr)
		}
		if now := first.componentPids(); !maps.Equal(pids, now) {
			t.Errorf("the refused restore changed node 1's control plane: pids %v, then %v", pids, now)
		}
	})

	var haCheckMade time.Time
	t.Run("a ConfigMap written through the endpoint is read through every API server", func(t *testing.T) {
		first.kubectl(t, "create", "configmap", "ha-check", "--from-literal=k=v")
		haCheckMade = time.Now()
		for _, n := range nodes {
			server := "https://" + n.addr + ":6443"
			out, err := n.kubectlErr(t, "--server", server, "get", "configmap", "ha-check", "-o", "jsonpath={.data.k}")
			if err != nil || out != "v" {
				t.Errorf("via %s: %q, %v", server, out, err)
			}
		}
	})

	t.Run("a join whose etcd cannot start leaves the members as they were", func(t *testing.T) {
		testFailedJoin(t, first, broken, endpoint, bundle, keyText, endpoints)
	})

	t.Run("writes through the endpoint survive a killed etcd member", func(t *testing.T) {
		killComponent(t, nodes[2], "etcd")
		for i := range 5 {
			first.kubectl(t, "create", "configmap", fmt.Sprintf("etcd-down-%d", i))
		}
		eventually(t, "all three etcd members healthy again", func() error {
			if r := first.etcdctl(t, endpoints, "endpoint", "health"); r.code != 0 {
				return fmt.Errorf("%s", r.stderr)
			}
			return nil
		})
	})

	t.Run("requests through the endpoint survive node 1's API server going down", func(t *testing.T) {
		// Moving the manifest out stops the API server for good (a killed
		// one is restarted at once); a request in flight when a backend dies
		// fails with any load balancer, so the check starts once it is gone.
		manifest := first.manifestPath("kube-apiserver")
		parked := filepath.Join(first.root, "kube-apiserver.yaml.parked")
		if err := os.Rename(manifest, parked); err != nil {
			t.Fatal(err)
		}
		eventually(t, "node 1's API server stopped", func() error {
			if pid, ok := first.componentPids()["kube-apiserver"]; ok {
				return fmt.Errorf("still runs as pid %d", pid)
			}
			return nil
		})
		for i := range 5 {
			first.kubectl(t, "create", "configmap", fmt.Sprintf("apiserver-down-%d", i))
			first.kubectl(t, "get", "configmap", fmt.Sprintf("apiserver-down-%d", i))
		}
		if err := os.Rename(parked, manifest); err != nil {
			t.Fatal(err)
		}
		eventually(t, "node 1's API server back", func() error {
			_, err := first.kubectlErr(t, "--server", "https://"+first.addr+":6443", "get", "--raw", "/readyz")
			return err
		})
	})

	t.Run("a joined node exports the cluster's own secrets", func(t *testing.T) {
		n := nodes[2]
		out := filepath.Join(n.root, "again.bundle")
		keyFile := filepath.Join(n.root, "bundle.key")
		if r := n.kubeboot(t, "certs", "export", "--config", n.config, "--out", out, "--key-file", keyFile); r.code != 0 || r.stdout != "" {
			t.Fatalf("export on %s: exit %d, stdout %q, stderr %s", n.name, r.code, r.stdout, r.stderr)
		}
		key, err := bundlepkg.DecodeKey(keyText)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		files, err := bundlepkg.Open(key, data)
		if err != nil {
			t.Fatal(err)
		}
		caKey, err := os.ReadFile(first.path("pki/ca.key"))
		if err != nil || string(files["ca.key"]) != string(caKey) {
			t.Errorf("%s's bundle holds another ca.key than %s (%v)", n.name, first.name, err)
		}
	})

	t.Run("re-running join writes nothing", func(t *testing.T) {
		n := nodes[1]
		r := n.kubeboot(t, "join", "--control-plane", "--config", n.config, "-o", "json")
		_, res, err := parseJSONOutput(r.stdout)
		if err != nil || r.code != 0 || !res.OK {
			t.Fatalf("re-run: code %d, %v, %+v\n%s", r.code, err, res, r.stderr)
		}
		if len(res.Written) != 0 {
			t.Errorf("re-run wrote %v", res.Written)
		}
		if voters, learners := first.etcdMembers(t, endpoints); len(voters) != 3 || len(learners) != 0 {
			t.Errorf("after the re-run: voters %v, learners %v", voters, learners)
		}
	})

	t.Run("diff and upgrade apply change nothing on any node", func(t *testing.T) {
		for _, n := range nodes {
			if r := n.kubeboot(t, "diff", "--config", n.config); r.code != 0 {
				t.Errorf("diff on %s: exit %d\n%s%s", n.name, r.code, r.stdout, r.stderr)
			}
			r := n.kubeboot(t, "upgrade", "apply", "--config", n.config)
			if r.code != 0 || !strings.Contains(r.stderr, "every manifest is up to date") {
				t.Errorf("upgrade apply without a change on %s: exit %d\n%s", n.name, r.code, r.stderr)
			}
		}
	})

	t.Run("quorum lost: node 2 restores the latest scheduled snapshot from S3, the others rejoin by themselves", func(t *testing.T) {
		testRestoreFromS3(t, nodes, endpoint, bucket, haCheckMade)
	})

	t.Run("reset on node 3 removes its etcd member; the cluster serves writes", func(t *testing.T) {
		n := nodes[2]
		r := n.kubeboot(t, "reset", "--force", "--config", n.config)
		if r.code != 0 {
			t.Fatalf("reset --force on %s exited %d:\n%s", n.name, r.code, r.stderr)
		}
		if !strings.Contains(r.stderr, "removed etcd member") {
			t.Errorf("reset did not report leaving etcd:\n%s", r.stderr)
		}
		voters, learners := first.etcdMembers(t, endpoints[:2])
		if len(voters) != 2 || len(learners) != 0 || slices.Contains(voters, n.name) {
			t.Errorf("after reset of %s: voters %v, learners %v", n.name, voters, learners)
		}
		for i := range 3 {
			first.kubectl(t, "create", "configmap", fmt.Sprintf("after-reset-%d", i))
		}
	})
}

// killComponent kills a control-plane process of n; its kubelet restarts it.
func killComponent(t *testing.T, n *node, component string) {
	t.Helper()
	pid, ok := n.componentPids()[component]
	if !ok {
		t.Fatalf("%s runs no %s", n.name, component)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s of %s: %v", component, n.name, err)
	}
}

// testFailedJoin joins a fourth node whose etcd exits at once (an unknown
// flag): the join must fail, remove its learner, and leave the voters.
func testFailedJoin(t *testing.T, first, n *node, endpoint, bundle, keyText string, endpoints []string) {
	before, _ := first.etcdMembers(t, endpoints)
	n.config = n.writeConfig(t, "kubeboot.yaml", map[string]any{
		"kind":                  "JoinConfiguration",
		"controlPlaneEndpoint":  endpoint,
		"join.etcdEndpoints":    endpoints,
		"etcd.local.extraArgs":  []any{map[string]any{"name": "no-such-flag", "value": "x"}},
		"timeouts.controlPlane": "20s",
	})
	keyFile := filepath.Join(n.root, "bundle.key")
	if err := os.WriteFile(keyFile, []byte(keyText+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := n.join(t, "--certs-bundle", n.give(t, bundle), "--key-file", keyFile)
	if r.code != 4 || !strings.Contains(r.stderr, "removed the learner") {
		t.Fatalf("join with a broken etcd: exit %d, want 4 and the learner removed:\n%s", r.code, r.stderr)
	}
	t.Logf("the failed join said:\n%s", r.stderr)
	after, learners := first.etcdMembers(t, endpoints)
	if strings.Join(after, ",") != strings.Join(before, ",") || len(learners) != 0 {
		t.Errorf("after the failed join: voters %v (before %v), learners %v", after, before, learners)
	}
}

// remoteCopy is a snapshot copy in S3, as etcd snapshot list --remote
// prints it.
type remoteCopy struct {
	URL  string    `json:"url"`
	Time time.Time `json:"time"`
}

// scheduledCopies lists the snapshot copies in the bucket, newest first.
func scheduledCopies(t *testing.T, n *node) []remoteCopy {
	t.Helper()
	r := n.kubeboot(t, "etcd", "snapshot", "list", "--remote", "--config", n.config, "-o", "json")
	var list []remoteCopy
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil {
		t.Fatalf("etcd snapshot list --remote: exit %d, %q, %s", r.code, r.stdout, r.stderr)
	}
	return list
}

// testRestoreFromS3 is the disaster: the control planes of nodes 1 and 3
// stop, so that etcd has no quorum; node 2 restores the newest copy
// another node's snapshot schedule put in S3; nodes 1 and 3 come back on
// their old data and rejoin by themselves, through their bootstrap units:
// node 3 by its JoinConfiguration, node 1, whose ClusterConfiguration
// founded the cluster, by joining the restored one instead. The objects
// are as at the snapshot (ha-check, made at haCheckMade, is there, though
// deleted before the disaster), etcd has three healthy voters again and
// every API server answers.
func testRestoreFromS3(t *testing.T, nodes []*node, endpoint string, bucket config.S3Storage, haCheckMade time.Time) {
	restorer := nodes[1]
	others := []*node{nodes[0], nodes[2]}
	for _, n := range nodes {
		eventually(t, "the snapshot pod of "+n.name+" Ready", func() error {
			out, err := restorer.kubectlErr(t, "get", "pod", "-n", "kube-system", config.NameEtcdSnapshots+"-"+n.name,
				"-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
			if err == nil && out != "True" {
				err = fmt.Errorf("Ready is %q", out)
			}
			return err
		})
	}
	var chosen string
	eventually(t, "a copy of every node's schedule in S3, and one taken after ha-check was made", func() error {
		list := scheduledCopies(t, restorer)
		for _, n := range nodes {
			if !slices.ContainsFunc(list, func(c remoteCopy) bool {
				return strings.HasPrefix(c.URL, "s3://"+bucket.Bucket+"/ha/"+n.name+"/")
			}) {
				return fmt.Errorf("no copy of %s's in %v", n.name, list)
			}
		}
		// The newest of another node's copies: node 2's own are in its
		// snapshot dir too, and this copy must come from S3.
		i := slices.IndexFunc(list, func(c remoteCopy) bool { return !strings.Contains(c.URL, "/ha/"+restorer.name+"/") })
		if i < 0 || !list[i].Time.After(haCheckMade) {
			return fmt.Errorf("no copy of another node's newer than ha-check: %v", list)
		}
		chosen = list[i].URL
		return nil
	})
	restorer.kubectl(t, "create", "configmap", "dr-gone")
	restorer.kubectl(t, "delete", "configmap", "ha-check")

	// The disaster takes the control planes of nodes 1 and 3 down, as the
	// guide's restore begins: their manifests move out. (API servers left
	// running without quorum would take the restoring node's kubelet, which
	// reaches them through the endpoint, minutes of timeouts before it
	// starts the restored control plane.)
	for _, n := range others {
		for _, name := range config.StaticPodNames {
			err := os.Rename(n.manifestPath(name), filepath.Join(n.root, name+".yaml.parked"))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
		}
	}
	for _, n := range others {
		eventually(t, "the control plane of "+n.name+" stopped", func() error {
			if pids := n.componentPids(); len(pids) > 0 {
				return fmt.Errorf("still runs %v", pids)
			}
			return nil
		})
	}
	if r := restorer.etcdctl(t, []string{etcdURL(restorer.addr)}, "endpoint", "health", "--command-timeout", "3s"); r.code == 0 {
		t.Fatalf("etcd on node 2 still healthy with two of three members stopped: %s", r.stdout)
	}

	start := time.Now()
	progress, err := timedLines(restorer.command(t, context.Background(), "kubeboot", "etcd", "restore", "--snapshot", chosen, "--config", restorer.config))
	if err != nil || !strings.Contains(progress, "downloading "+chosen) {
		t.Fatalf("etcd restore --snapshot %s: %v:\n%s", chosen, err, progress)
	}
	t.Logf("TIMING: etcd restore from S3 (download, restore, control plane healthy): %s; its progress:\n%s", time.Since(start).Round(time.Millisecond), progress)
	if v := restorer.kubectl(t, "get", "configmap", "ha-check", "-o", "jsonpath={.data.k}"); v != "v" {
		t.Errorf("ha-check after the restore: %q, want its value at the snapshot", v)
	}
	if _, err := restorer.kubectlErr(t, "get", "configmap", "dr-gone"); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("dr-gone, made after the snapshot, after the restore: %v", err)
	}

	// Nodes 1 and 3 come back: their kubelets start the control planes
	// they had, on the data of the cluster the restore replaced, of which
	// the two members are a quorum; and each node's bootstrap unit runs,
	// as at a boot, at the same time, from its file: node 1's the
	// ClusterConfiguration it founded the cluster with, node 3's a
	// JoinConfiguration. Nobody resets them: each finds the restored
	// cluster, leaves its old data and joins it again.
	var endpoints []string
	for _, n := range nodes {
		endpoints = append(endpoints, etcdURL(n.addr))
	}
	for _, n := range others {
		for _, name := range config.StaticPodNames {
			if err := os.Rename(filepath.Join(n.root, name+".yaml.parked"), n.manifestPath(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
		}
	}
	nodes[0].haConfig(t, endpoint, nil, bucket, nil)
	nodes[2].haConfig(t, endpoint, endpoints[:2], bucket, nil)
	for _, n := range others {
		writeFile(t, filepath.Join(n.m.Root(), bootstrap.ConfigPath), string(readFile(t, n.config)))
	}
	eventually(t, "the old cluster's members on nodes 1 and 3 answer", func() error {
		if r := restorer.etcdctl(t, []string{endpoints[0], endpoints[2]}, "endpoint", "status"); r.code != 0 {
			return errors.New(r.stderr)
		}
		return nil
	})
	start = time.Now()
	journals := make([]string, len(others))
	var wg sync.WaitGroup
	for i, n := range others {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
			defer cancel()
			since := time.Now().Add(-time.Second).Unix()
			out, err := n.m.Output(ctx, "systemctl", "restart", "kubeboot-bootstrap")
			journal, _ := n.m.Output(context.Background(), "journalctl", "--no-pager", "-o", "cat", "-u", "kubeboot-bootstrap", "--since", fmt.Sprintf("@%d", since))
			journals[i] = string(journal)
			if err != nil {
				journals[i] = fmt.Sprintf("%s\nthe unit failed: %v: %s", journal, err, out)
			}
		})
	}
	wg.Wait()
	t.Logf("TIMING: nodes 1 and 3 rejoin by their bootstrap units, at once: %s", time.Since(start).Round(time.Millisecond))
	for i, n := range others {
		journal := journals[i]
		wants := []string{"the member joins again as a new one", "removed " + n.path("etcd") + ".left"}
		if n == nodes[0] {
			wants = append(wants, "this node joins it as a control-plane node instead of founding a cluster")
		}
		for _, want := range wants {
			if strings.Contains(journal, "the unit failed") || !strings.Contains(journal, want) {
				t.Errorf("the bootstrap of %s did not leave its old data and rejoin (%q):\n%s", n.name, want, testsupport.LastLines(journal, 40))
			}
		}
		if _, err := os.Stat(n.path("etcd") + ".left"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s's old etcd data is still there: %v", n.name, err)
		}
	}
	if voters, learners := restorer.etcdMembers(t, endpoints); len(voters) != 3 || len(learners) != 0 {
		t.Errorf("after the rejoins: voters %v, learners %v", voters, learners)
	}
	if r := restorer.etcdctl(t, endpoints, "endpoint", "health"); r.code != 0 {
		t.Errorf("etcd endpoint health after the rejoins: %s%s", r.stdout, r.stderr)
	}
	for _, n := range nodes {
		server := "https://" + n.addr + ":6443"
		if v, err := n.kubectlErr(t, "--server", server, "get", "configmap", "ha-check", "-o", "jsonpath={.data.k}"); err != nil || v != "v" {
			t.Errorf("ha-check via %s: %q, %v", server, v, err)
		}
	}
}
