package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubeboot/kubeboot/internal/backup"
	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/s3store"
	"github.com/kubeboot/kubeboot/internal/s3store/s3test"
	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// TestEtcdSnapshotSchedule runs the schedule against a real etcd with
// kubeboot's PKI and a real S3 server: each round saves a verified
// snapshot and copies it to <prefix><node>/ in the bucket, both places
// keep the newest --keep (a key kubeboot did not name is left alone),
// the status file records the last success, `etcd snapshot list` shows
// it and `list --remote` the copies, and a failing round is recorded
// beside the last success; the command's /readyz follows the rounds.
func TestEtcdSnapshotSchedule(t *testing.T) {
	root, _, endpoint, tlsFiles := etcdNode(t)
	putKeys(t, endpoint, tlsFiles, 5)
	srv := s3test.Start(t, s3test.Options{})
	bucket, err := s3store.Open(srv.Storage, func(p string) string { return p })
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	foreign := filepath.Join(t.TempDir(), "notes.txt")
	writeFile(t, filepath.Dir(foreign), "notes.txt", "not a snapshot")
	if _, err := bucket.Upload(ctx, foreign, "lab/node-1/notes.txt"); err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join(root, "var", "lib", "kubeboot", "etcd-snapshots")
	var log syncBuffer
	s := &backup.Schedule{Endpoint: endpoint, TLS: tlsFiles, Dir: dir, Interval: time.Hour, Keep: 2,
		Bucket: bucket, KeyPrefix: "lab/node-1/", Log: output.NewReporter(&log, false).Infof}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var saved []string
	for range 3 {
		st := s.Once(ctx)
		if !st.OK() || st.LastUpload != bucket.URL("lab/node-1/"+filepath.Base(st.LastSnapshot)) {
			t.Fatalf("round: %+v\n%s", st, log.String())
		}
		saved = append(saved, filepath.Base(st.LastSnapshot))
		time.Sleep(2 * time.Millisecond) // names are to the millisecond
	}
	local, err := etcd.ListSnapshots(t.Context(), dir)
	if err != nil || len(local) != 2 || local[0].Name != saved[2] || local[1].Name != saved[1] || !local[0].Verified {
		t.Errorf("snapshot dir after 3 rounds keeping 2: %+v, %v; saved %v", local, err, saved)
	}
	objects, err := bucket.List(ctx, "lab/")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objects {
		keys = append(keys, o.Key)
	}
	slices.Sort(keys)
	if want := []string{"lab/node-1/" + saved[1], "lab/node-1/" + saved[2], "lab/node-1/notes.txt"}; !slices.Equal(keys, want) {
		t.Errorf("bucket after 3 rounds keeping 2: %v, want %v", keys, want)
	}

	// The node's configuration names the bucket: list shows the schedule's
	// outcome and the copies.
	cfg := writeFile(t, t.TempDir(), "node.yaml", fmt.Sprintf("apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\n"+
		"node: {name: node-1, advertiseAddress: 127.0.0.1}\n"+
		"etcd: {local: {scheduledSnapshots: {s3: {endpoint: %q, bucket: %s, prefix: lab/, credentialsFile: %s, caFile: %s}}}}\n",
		srv.Storage.Endpoint, srv.Storage.Bucket, srv.Storage.CredentialsFile, srv.Storage.CAFile))
	code, stdout, stderr := runCLI(t, "etcd", "snapshot", "list", "--config", cfg, "--root", root, "-o", "json")
	var listing snapshotListing
	if code != 0 || json.Unmarshal([]byte(stdout), &listing) != nil || len(listing.Snapshots) != 2 || listing.Schedule == nil || !listing.Schedule.OK() {
		t.Fatalf("list: code %d, %q, %q", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "etcd", "snapshot", "list", "--config", cfg, "--root", root)
	if code != 0 || !strings.Contains(stdout, "scheduled snapshots: last success ") || !strings.Contains(stdout, saved[2]+"), copied to s3://") {
		t.Errorf("list as a table: code %d, %q, %q", code, stdout, stderr)
	}
	// The CA and credentials files are the host's: no --root for them.
	code, stdout, stderr = runCLI(t, "etcd", "snapshot", "list", "--remote", "--config", cfg, "-o", "json")
	var remote []remoteSnapshot
	if code != 0 || json.Unmarshal([]byte(stdout), &remote) != nil || len(remote) != 2 || remote[0].URL != bucket.URL("lab/node-1/"+saved[2]) {
		t.Errorf("list --remote: code %d, %q, %q", code, stdout, stderr)
	}

	// A round that fails (etcd gone) is recorded beside the last success,
	// by a new schedule too, as after a restart of the pod.
	last := listing.Schedule.LastSuccess
	broken := &backup.Schedule{Endpoint: fmt.Sprintf("https://127.0.0.1:%d", testsupport.FreePort(t)), TLS: tlsFiles, Dir: dir, Interval: time.Hour, Keep: 2, Log: s.Log}
	st := broken.Once(ctx)
	if st.OK() || !strings.Contains(st.Error, "does not answer") || !st.LastSuccess.Equal(last) {
		t.Errorf("failed round: %+v, want the error and the last success %s", st, last)
	}
	code, stdout, _ = runCLI(t, "etcd", "snapshot", "list", "--config", cfg, "--root", root)
	if code != 0 || !strings.Contains(stdout, "scheduled snapshots: FAILING: ") {
		t.Errorf("list after a failed round: code %d, %q", code, stdout)
	}
	if !strings.Contains(log.String(), "scheduled snapshot FAILED (last success: "+last.Format(time.RFC3339)+")") {
		t.Errorf("no log line of the failure:\n%s", log.String())
	}

	// The command: ready once its first round succeeded.
	port := testsupport.FreePort(t)
	cmdCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan int, 1)
	go func() {
		var stdout, stderr strings.Builder
		done <- runArgs(cmdCtx, newDeps(""), []string{"etcd", "snapshot", "schedule", "--endpoint", endpoint, "--cacert", tlsFiles.CA, "--cert", tlsFiles.Cert, "--key", tlsFiles.Key,
			"--dir", dir, "--keep", "2", "--health-port", strconv.Itoa(port), "--node-name", "node-1",
			"--s3-endpoint", srv.Storage.Endpoint, "--s3-bucket", srv.Storage.Bucket, "--s3-prefix", "lab/",
			"--s3-credentials-file", srv.Storage.CredentialsFile, "--s3-ca-file", srv.Storage.CAFile}, &stdout, &stderr)
	}()
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return httpStatus(base+"/readyz") == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("/readyz never became ready: %v", err)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("schedule exited %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("schedule did not stop")
	}
	if st, ok, err := backup.ReadStatus(dir); !ok || err != nil || !st.OK() || !st.LastSuccess.After(last) {
		t.Errorf("status after the command's round: %+v, %v, %v", st, ok, err)
	}

	for _, args := range [][]string{
		{"--interval", "10s"},
		{"--keep", "0"},
		{"--s3-endpoint", srv.Storage.Endpoint},
	} {
		base := []string{"etcd", "snapshot", "schedule", "--endpoint", endpoint, "--cacert", tlsFiles.CA, "--cert", tlsFiles.Cert, "--key", tlsFiles.Key}
		if code, _, stderr := runCLI(t, append(base, args...)...); code != 2 || !strings.Contains(stderr, args[0]) {
			t.Errorf("schedule %v: code %d, %q", args, code, stderr)
		}
	}
}

// TestRestoreFromS3Refusals: a restore from s3:// needs the configuration's
// bucket and a snapshot name kubeboot gives; each refusal says so, exit 2.
func TestRestoreFromS3Refusals(t *testing.T) {
	plain := writeFile(t, t.TempDir(), "node.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nnode: {name: node-1, advertiseAddress: 127.0.0.1}\n")
	withBucket := writeFile(t, t.TempDir(), "node.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nnode: {name: node-1, advertiseAddress: 127.0.0.1}\n"+
		"etcd: {local: {scheduledSnapshots: {s3: {endpoint: \"https://127.0.0.1:1\", bucket: backups, credentialsFile: /nonexistent/credentials}}}}\n")
	for _, tc := range []struct {
		cfg, snapshot, want string
	}{
		{plain, "s3://backups/lab/node-1/etcd-snapshot-20261126T000000.000Z.db", "etcd.local.scheduledSnapshots.s3 is not set"},
		{withBucket, "s3://other/lab/node-1/etcd-snapshot-20261126T000000.000Z.db", `the configuration's bucket is "backups"`},
		{withBucket, "s3://backups/lab/node-1/mine.db", `"mine.db" is no name kubeboot gives a snapshot`},
		{withBucket, "s3://backups", "s3://"},
	} {
		code, _, stderr := runCLI(t, "etcd", "restore", "--snapshot", tc.snapshot, "--config", tc.cfg, "--force")
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("restore --snapshot %s: code %d, %q; want 2 and %q", tc.snapshot, code, stderr, tc.want)
		}
	}
}
