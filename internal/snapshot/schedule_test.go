package snapshot

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/s3store"
	"github.com/kubeboot/kubeboot/internal/s3store/s3test"
	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// readyz is what s's /readyz answers: its status code and body.
func readyz(s *Schedule) (int, string) {
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	return w.Code, w.Body.String()
}

// withBucket is the configuration of node-1 copying its snapshots to
// storage under the prefix "lab/".
func withBucket(storage config.S3Storage) *config.ClusterConfiguration {
	c := config.New()
	storage.Prefix = "lab/"
	c.Etcd.Local = &config.LocalEtcd{ScheduledSnapshots: &config.ScheduledSnapshots{S3: &storage}}
	return c
}

// TestScheduleCopiesListsAndFetches runs the schedule against a real etcd
// with kubeboot's PKI and a real S3 server: each round saves a verified
// snapshot and copies it to <prefix><node>/ in the bucket, both places
// keep the newest Keep (a key kubeboot did not name and another node's
// copies are left alone), the status file records the last success and
// List shows it, ListRemote lists every node's copies, a failing round is
// recorded beside the last success, /readyz follows the rounds, and Fetch
// brings a copy to another node once.
func TestScheduleCopiesListsAndFetches(t *testing.T) {
	n, log, endpoint, _ := etcdNode(t)
	srv := s3test.Start(t, s3test.Options{})
	bucket, err := s3store.Open(srv.Storage, func(p string) string { return p })
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	foreign := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(foreign, []byte("not a snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	otherNode := "lab/node-2/" + etcd.SnapshotName(time.Now().UTC().Add(-time.Hour))
	for _, key := range []string{"lab/node-1/notes.txt", otherNode} {
		if _, err := bucket.Upload(ctx, foreign, key); err != nil {
			t.Fatal(err)
		}
	}

	dir := n.Files.HostPath(n.Config.Etcd.Local.SnapshotsDir)
	s := &Schedule{Endpoint: endpoint, TLS: etcd.LocalTLS(n.Config, n.Files.HostPath), Dir: dir, Interval: time.Hour, Keep: 2,
		Bucket: bucket, KeyPrefix: NodeKeyPrefix("lab/", "node-1"), Log: output.NewReporter(log, false).Infof}
	if code, body := readyz(s); code != http.StatusServiceUnavailable || !strings.Contains(body, "no snapshot taken yet") {
		t.Errorf("/readyz before a round: %d %q", code, body)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var saved []string
	for range 3 {
		st := s.Once(ctx)
		if !st.OK() || st.LastUpload != bucket.URL("lab/node-1/"+filepath.Base(st.LastSnapshot)) {
			t.Fatalf("round: %+v\n%s", st, log)
		}
		saved = append(saved, filepath.Base(st.LastSnapshot))
		time.Sleep(2 * time.Millisecond) // names are to the millisecond
	}
	if code, body := readyz(s); code != http.StatusOK || !strings.HasPrefix(body, "ok: last snapshot ") {
		t.Errorf("/readyz after the rounds: %d %q", code, body)
	}
	local, err := etcd.ListSnapshots(ctx, dir)
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
	if want := []string{"lab/node-1/" + saved[1], "lab/node-1/" + saved[2], "lab/node-1/notes.txt", otherNode}; !slices.Equal(keys, want) {
		t.Errorf("bucket after 3 rounds keeping 2: %v, want %v", keys, want)
	}

	// The node's configuration names the bucket: List shows the
	// schedule's outcome, ListRemote every node's copies.
	cfg := newNode(t, n.Files.HostPath("/"), log, withBucket(srv.Storage)).Config
	listing, err := List(ctx, cfg, n.Files.HostPath)
	if err != nil || len(listing.Snapshots) != 2 || listing.Schedule == nil || !listing.Schedule.OK() ||
		listing.Schedule.LastSnapshot != filepath.Join(dir, saved[2]) || listing.Schedule.LastUpload != bucket.URL("lab/node-1/"+saved[2]) {
		t.Fatalf("list: %+v, %v", listing, err)
	}
	remote, err := ListRemote(ctx, cfg, func(p string) string { return p })
	if err != nil || len(remote) != 3 || remote[0].URL != bucket.URL("lab/node-1/"+saved[2]) ||
		remote[1].URL != bucket.URL("lab/node-1/"+saved[1]) || remote[2].URL != bucket.URL(otherNode) || remote[0].Size != local[0].Size {
		t.Errorf("list remote: %+v, %v", remote, err)
	}

	// A round that fails (etcd gone) is recorded beside the last success,
	// by a new schedule too, as after a restart of the pod.
	last := listing.Schedule.LastSuccess
	broken := &Schedule{Endpoint: fmt.Sprintf("https://127.0.0.1:%d", testsupport.FreePort(t)), TLS: s.TLS, Dir: dir, Interval: time.Hour, Keep: 2, Log: s.Log}
	st := broken.Once(ctx)
	if st.OK() || !strings.Contains(st.Error, "does not answer") || !st.LastSuccess.Equal(last) {
		t.Errorf("failed round: %+v, want the error and the last success %s", st, last)
	}
	if code, body := readyz(broken); code != http.StatusServiceUnavailable || !strings.Contains(body, "the last scheduled snapshot failed: ") {
		t.Errorf("/readyz after a failed round: %d %q", code, body)
	}
	if recorded, ok, err := ReadStatus(dir); !ok || err != nil || recorded.Error != st.Error || !recorded.LastSuccess.Equal(last) {
		t.Errorf("status file after a failed round: %+v, %v, %v", recorded, ok, err)
	}
	if !strings.Contains(log.String(), "scheduled snapshot FAILED (last success: "+last.Format(time.RFC3339)+")") {
		t.Errorf("no log line of the failure:\n%s", log)
	}

	// Another node fetches the newest copy into its snapshot dir, with the
	// CA and credentials files on its disk, once.
	var log2 bytes.Buffer
	root2 := t.TempDir()
	for _, f := range []string{srv.Storage.CAFile, srv.Storage.CredentialsFile} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(root2, filepath.Dir(f)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root2, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n2 := newNode(t, root2, &log2, withBucket(srv.Storage))
	url := bucket.URL("lab/node-1/" + saved[2])
	got, err := Fetch(ctx, n2, url)
	want := n2.Files.HostPath(filepath.Join(n2.Config.Etcd.Local.SnapshotsDir, saved[2]))
	if err != nil || got != want || !strings.Contains(log2.String(), "downloading "+url+" to "+want) {
		t.Fatalf("fetch: %q, %v, want %s\n%s", got, err, want, log2.String())
	}
	if info, err := etcd.VerifySnapshot(ctx, got); err != nil || info.Revision != local[0].Revision {
		t.Errorf("fetched snapshot: %+v, %v", info, err)
	}
	log2.Reset()
	if again, err := Fetch(ctx, n2, url); err != nil || again != want || !strings.Contains(log2.String(), "verifies: not downloading it again") {
		t.Errorf("fetch again: %q, %v\n%s", again, err, log2.String())
	}
	// A corrupt copy in its place is replaced.
	if err := os.WriteFile(want, []byte("truncated"), 0o600); err != nil {
		t.Fatal(err)
	}
	log2.Reset()
	if _, err := Fetch(ctx, n2, url); err != nil || !strings.Contains(log2.String(), "downloading ") {
		t.Errorf("fetch over a corrupt copy: %v\n%s", err, log2.String())
	}
	if _, err := etcd.VerifySnapshot(ctx, want); err != nil {
		t.Errorf("the corrupt copy was not replaced: %v", err)
	}
}
