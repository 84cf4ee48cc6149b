package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/inputfile"
	"github.com/kubeboot/kubeboot/internal/s3store"
)

// StatusFile is the name of the status file in the snapshot dir.
const StatusFile = "schedule-status.json"

// statusLimit caps the status file: a few timestamps, paths and one
// round's error, well under a KiB; 1 MiB fits any error and refuses a
// wrong file at once.
const statusLimit = 1 << 20

// Status is the outcome of a schedule's rounds, as its status file holds it.
type Status struct {
	// LastAttempt is when the last round started.
	LastAttempt time.Time `json:"lastAttempt"`
	// LastSuccess is when the last round that succeeded started; zero
	// when none has.
	LastSuccess time.Time `json:"lastSuccess,omitzero"`
	// LastSnapshot is the file the last successful round saved.
	LastSnapshot string `json:"lastSnapshot,omitempty"`
	// LastUpload is the S3 URL it was copied to, when a bucket is set.
	LastUpload string `json:"lastUpload,omitempty"`
	// Error is why the last round failed; empty when it succeeded.
	Error string `json:"error,omitempty"`
}

// OK says whether the last round succeeded.
func (s Status) OK() bool { return s.Error == "" && !s.LastSuccess.IsZero() }

// NodeKeyPrefix starts the keys of node's copies in a bucket under the
// configured prefix: "<prefix><node>/", like "clusters/lab/cp1/". Each
// node of a cluster copies its snapshots under its own.
func NodeKeyPrefix(prefix, node string) string { return prefix + node + "/" }

// Schedule is one node's snapshot schedule: every Interval a verified
// snapshot of the local member into Dir, the newest Keep kept, each copied
// to Bucket when one is set, where the newest Keep are kept too. It is
// what the kubeboot-etcd-snapshots static pod runs, through `kubeboot etcd
// snapshot schedule`, and needs etcd and nothing else: no API server. Each
// round's outcome goes to Dir's status file (StatusFile).
type Schedule struct {
	// Endpoint is the local member's client URL.
	Endpoint string
	// TLS is the client certificate and CA to reach it.
	TLS etcd.TLSFiles
	// Dir is the snapshot dir.
	Dir string
	// Interval is the time between two rounds.
	Interval time.Duration
	// Keep is how many of the newest snapshots are kept, in Dir and in
	// the bucket alike.
	Keep int
	// Bucket receives a copy of each snapshot; nil for none.
	Bucket *s3store.Store
	// KeyPrefix starts the keys of this node's copies in Bucket: the
	// configured prefix and the node's name, like "clusters/lab/cp1/"
	// (NodeKeyPrefix).
	KeyPrefix string
	// Log receives a line per round.
	Log func(format string, args ...any)

	mu     sync.Mutex
	status Status
}

// Run takes a snapshot at once, then every Interval, until ctx is done.
// A failing round is logged and recorded; the schedule goes on.
func (s *Schedule) Run(ctx context.Context) error {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("create snapshot dir: %w", err)
	}
	if err := os.Chmod(s.Dir, 0o700); err != nil {
		return fmt.Errorf("snapshot dir: %w", err)
	}
	ticker := time.NewTicker(s.Interval)
	defer ticker.Stop()
	for {
		s.Once(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// Status is the outcome of the rounds so far.
func (s *Schedule) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// Once runs one round: save, copy, prune; then records its outcome in the
// status file and returns it. A schedule's first round starts from the
// status file's record, so that a restarted pod still knows its last
// success.
func (s *Schedule) Once(ctx context.Context) Status {
	s.mu.Lock()
	st := s.status
	s.mu.Unlock()
	if st.LastAttempt.IsZero() {
		if recorded, ok, err := ReadStatus(s.Dir); ok && err == nil {
			st = recorded
		}
	}
	st.LastAttempt = time.Now().UTC()
	saved, uploaded, err := s.round(ctx, st.LastAttempt)
	if err != nil {
		st.Error = err.Error()
		s.Log("scheduled snapshot FAILED (last success: %s): %v", lastSuccess(st), err)
	} else {
		st.Error, st.LastSuccess, st.LastSnapshot, st.LastUpload = "", st.LastAttempt, saved.Path, uploaded
		where := ""
		if uploaded != "" {
			where = ", copied to " + uploaded
		}
		s.Log("scheduled snapshot %s: %d bytes, revision %d, %d keys%s", saved.Path, saved.Size, saved.Revision, saved.Keys, where)
	}
	if werr := writeStatus(s.Dir, st); werr != nil {
		s.Log("record the schedule's status: %v", werr)
	}
	s.mu.Lock()
	s.status = st
	s.mu.Unlock()
	return st
}

// Handler serves the schedule's health: /healthz, which answers while the
// process runs, and /readyz, which fails with the error until a round has
// succeeded and whenever the last round failed.
func (s *Schedule) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		st := s.Status()
		switch {
		case st.OK():
			_, _ = fmt.Fprintf(w, "ok: last snapshot %s\n", st.LastSuccess.Format(time.RFC3339))
		case st.LastAttempt.IsZero():
			http.Error(w, "no snapshot taken yet", http.StatusServiceUnavailable)
		default:
			http.Error(w, "the last scheduled snapshot failed: "+st.Error, http.StatusServiceUnavailable)
		}
	})
	return mux
}

// lastSuccess is when st's last round that succeeded started, for a log
// line; "never" when none has.
func lastSuccess(st Status) string {
	if st.LastSuccess.IsZero() {
		return "never"
	}
	return st.LastSuccess.Format(time.RFC3339)
}

// round saves a snapshot taken at, copies it to the bucket and prunes
// both places. A snapshot saved but not copied is kept, and the round
// fails: the copy off the node is what survives the node.
func (s *Schedule) round(ctx context.Context, at time.Time) (etcd.SnapshotInfo, string, error) {
	name := etcd.SnapshotName(at)
	info, err := etcd.SaveSnapshot(ctx, s.Endpoint, s.TLS, filepath.Join(s.Dir, name))
	if err != nil {
		return info, "", err
	}
	info.Time = at
	var errs []error
	uploaded := ""
	if s.Bucket != nil {
		key := s.KeyPrefix + name
		if _, err := s.Bucket.Upload(ctx, info.Path, key); err != nil {
			errs = append(errs, err)
		} else {
			uploaded = s.Bucket.URL(key)
		}
	}
	errs = append(errs, s.pruneLocal(ctx))
	if s.Bucket != nil && uploaded != "" {
		errs = append(errs, s.pruneBucket(ctx))
	}
	return info, uploaded, errors.Join(errs...)
}

// pruneLocal keeps the newest Keep snapshots in Dir that verify, and
// those that could not be verified.
func (s *Schedule) pruneLocal(ctx context.Context) error {
	list, err := etcd.ListSnapshots(ctx, s.Dir)
	if err != nil {
		return err
	}
	for _, e := range etcd.SnapshotsToPrune(list, s.Keep) {
		if err := os.Remove(filepath.Join(s.Dir, e.Name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("prune snapshot: %w", err)
		}
	}
	return nil
}

// pruneBucket keeps the newest Keep of this node's copies, by the time in
// their names; keys kubeboot did not name are never touched.
func (s *Schedule) pruneBucket(ctx context.Context) error {
	objects, err := s.Bucket.List(ctx, s.KeyPrefix)
	if err != nil {
		return err
	}
	type named struct {
		key string
		at  time.Time
	}
	var ours []named
	for _, o := range objects {
		rest := o.Key[len(s.KeyPrefix):]
		if t, ok := etcd.SnapshotTime(rest); ok && path.Base(rest) == rest {
			ours = append(ours, named{o.Key, t})
		}
	}
	slices.SortFunc(ours, func(a, b named) int { return b.at.Compare(a.at) })
	for _, o := range ours[min(s.Keep, len(ours)):] {
		if err := s.Bucket.Remove(ctx, o.key); err != nil {
			return err
		}
	}
	return nil
}

// writeStatus replaces dir's status file atomically.
func writeStatus(dir string, st Status) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return (&files.AtomicWriter{}).WriteFile(filepath.Join(dir, StatusFile), append(data, '\n'), 0o600)
}

// ReadStatus reads dir's status file; ok is false when there is none: no
// schedule has run there. It reads only a regular file of at most
// statusLimit bytes, without blocking: a FIFO or a link to a device in
// its place is an error that names it.
func ReadStatus(dir string) (st Status, ok bool, err error) {
	data, err := inputfile.Read(filepath.Join(dir, StatusFile), statusLimit)
	if errors.Is(err, os.ErrNotExist) {
		return Status{}, false, nil
	}
	if err != nil {
		return Status{}, false, fmt.Errorf("read the snapshot schedule's status: %w", err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return Status{}, false, fmt.Errorf("read the snapshot schedule's status %s: %w", filepath.Join(dir, StatusFile), err)
	}
	return st, true, nil
}
