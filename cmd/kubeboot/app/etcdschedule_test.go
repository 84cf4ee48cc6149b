package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubeboot/kubeboot/internal/etcd/etcdtest"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/s3store"
	"github.com/kubeboot/kubeboot/internal/s3store/s3test"
	"github.com/kubeboot/kubeboot/internal/snapshot"
	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// TestEtcdSnapshotSchedule runs `etcd snapshot schedule` against a real
// etcd with kubeboot's PKI and a real S3 server: it is ready once its
// first round saved a snapshot and copied it to <prefix><node>/ in the
// bucket, and exits 0 when its context ends; `etcd snapshot list` then
// shows the schedule's outcome (as JSON and as a table), `list --remote`
// the copy, and a failing round afterwards shows as FAILING. Flags it
// cannot run with are usage errors (the schedule's own rounds are
// package snapshot's tests).
func TestEtcdSnapshotSchedule(t *testing.T) {
	root, _, endpoint, tlsFiles := etcdNode(t)
	etcdtest.PutKeys(t, endpoint, tlsFiles, 5)
	srv := s3test.Start(t, s3test.Options{})
	bucket, err := s3store.Open(srv.Storage, func(p string) string { return p })
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	dir := filepath.Join(root, "var", "lib", "kubeboot", "etcd-snapshots")

	// The command: ready once its first round succeeded.
	port := testsupport.FreePort(t)
	cmdCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan int, 1)
	var cmdStderr testsupport.SyncBuffer
	go func() {
		var stdout strings.Builder
		done <- runArgs(cmdCtx, newDeps(""), []string{"etcd", "snapshot", "schedule", "--endpoint", endpoint, "--cacert", tlsFiles.CA, "--cert", tlsFiles.Cert, "--key", tlsFiles.Key,
			"--dir", dir, "--keep", "2", "--health-port", strconv.Itoa(port), "--node-name", "node-1",
			"--s3-endpoint", srv.Storage.Endpoint, "--s3-bucket", srv.Storage.Bucket, "--s3-prefix", "lab/",
			"--s3-credentials-file", srv.Storage.CredentialsFile, "--s3-ca-file", srv.Storage.CAFile}, &stdout, &cmdStderr)
	}()
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return httpStatus(base+"/readyz") == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("/readyz never became ready: %v\n%s", err, cmdStderr.String())
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
	st, ok, err := snapshot.ReadStatus(dir)
	if !ok || err != nil || !st.OK() || st.LastUpload != bucket.URL("lab/node-1/"+filepath.Base(st.LastSnapshot)) {
		t.Fatalf("status after the command's round: %+v, %v, %v\n%s", st, ok, err, cmdStderr.String())
	}
	saved := filepath.Base(st.LastSnapshot)

	// The node's configuration names the bucket: list shows the schedule's
	// outcome and the copies.
	cfg := writeFile(t, t.TempDir(), "node.yaml", fmt.Sprintf("apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\n"+
		"node: {name: node-1, advertiseAddress: 127.0.0.1}\n"+
		"etcd: {local: {scheduledSnapshots: {s3: {endpoint: %q, bucket: %s, prefix: lab/, credentialsFile: %s, caFile: %s}}}}\n",
		srv.Storage.Endpoint, srv.Storage.Bucket, srv.Storage.CredentialsFile, srv.Storage.CAFile))
	code, stdout, stderr := runCLI(t, "etcd", "snapshot", "list", "--config", cfg, "--root", root, "-o", "json")
	var listing snapshot.Listing
	if code != 0 || json.Unmarshal([]byte(stdout), &listing) != nil || len(listing.Snapshots) != 1 || listing.Schedule == nil || !listing.Schedule.OK() {
		t.Fatalf("list: code %d, %q, %q", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "etcd", "snapshot", "list", "--config", cfg, "--root", root)
	if code != 0 || !strings.Contains(stdout, "scheduled snapshots: last success ") || !strings.Contains(stdout, saved+"), copied to s3://") {
		t.Errorf("list as a table: code %d, %q, %q", code, stdout, stderr)
	}
	// The CA and credentials files are the host's: no --root for them.
	code, stdout, stderr = runCLI(t, "etcd", "snapshot", "list", "--remote", "--config", cfg, "-o", "json")
	var remote []snapshot.Remote
	if code != 0 || json.Unmarshal([]byte(stdout), &remote) != nil || len(remote) != 1 || remote[0].URL != bucket.URL("lab/node-1/"+saved) {
		t.Errorf("list --remote: code %d, %q, %q", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "etcd", "snapshot", "list", "--remote", "--config", cfg)
	if code != 0 || !strings.HasPrefix(stdout, "URL ") || !strings.Contains(stdout, bucket.URL("lab/node-1/"+saved)+" ") {
		t.Errorf("list --remote as a table: code %d, %q, %q", code, stdout, stderr)
	}

	// A round that fails (etcd gone) shows as FAILING.
	var log testsupport.SyncBuffer
	broken := &snapshot.Schedule{Endpoint: fmt.Sprintf("https://127.0.0.1:%d", testsupport.FreePort(t)), TLS: tlsFiles, Dir: dir, Interval: time.Hour, Keep: 2,
		Log: output.NewReporter(&log, false).Infof}
	if st := broken.Once(ctx); st.OK() {
		t.Fatalf("a round against no etcd: %+v", st)
	}
	code, stdout, _ = runCLI(t, "etcd", "snapshot", "list", "--config", cfg, "--root", root)
	if code != 0 || !strings.Contains(stdout, "scheduled snapshots: FAILING: ") {
		t.Errorf("list after a failed round: code %d, %q", code, stdout)
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
