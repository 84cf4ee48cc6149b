package phases

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"

	"github.com/kubeboot/kubeboot/internal/atomicfile"
	"github.com/kubeboot/kubeboot/internal/config"
)

// applyRecord is what the last applies of kubeboot's objects from this
// node sent and got back, by object ("ConfigMap kube-system/coredns"),
// kept in ApplyRecordPath. An object the API server still holds exactly
// as the apply returned it (its resourceVersion and UID among it), to
// which the same apply would go, is one that apply would leave as it is:
// applyOver skips it, and a converged `upgrade apply` reads its objects
// without writing any. Anything else that changed the object, a
// controller's status among it, or a new configuration, sends the apply
// again. A missing or unreadable record only costs the applies.
type applyRecord struct {
	mu      sync.Mutex
	entries map[string]appliedObject
	changed bool
}

// appliedObject is one object's entry: SHA-256 hashes, in hex, of the
// apply's body and of the object the API server returned.
type appliedObject struct {
	Sent   string `json:"sent"`
	Result string `json:"result"`
}

// ApplyRecordPath is the node path of the record of kubeboot's applies
// (see applyRecord), in kubeboot's state directory.
func ApplyRecordPath(c *config.ClusterConfiguration) string {
	return filepath.Join(c.Paths.KubeconfigDir, "kubeboot", "applied.json")
}

// loadApplyRecord reads the node's record; a missing or unreadable one is
// an empty record, which the next save replaces.
func loadApplyRecord(s *Node) *applyRecord {
	r := &applyRecord{entries: map[string]appliedObject{}}
	data, err := s.Files.ReadFile(ApplyRecordPath(s.Config))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.Report.Warnf("%v: every object is applied again", err)
		}
		return r
	}
	if err := json.Unmarshal(data, &r.entries); err != nil {
		s.Report.Warnf("read %s: %v: every object is applied again", ApplyRecordPath(s.Config), err)
		r.entries = map[string]appliedObject{}
	}
	return r
}

// save writes the record when an apply changed it. It is kubeboot's own
// bookkeeping, not part of what the node converges to, so it is written
// beside the run's files.Writer, which would list it among the files the
// run wrote: a re-run that found the cluster's objects changed by their
// controllers (a DaemonSet's status) would not be one that "wrote
// nothing".
func (r *applyRecord) save(s *Node) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.changed {
		return nil
	}
	data, err := json.MarshalIndent(r.entries, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the record of applies: %w", err)
	}
	path := ApplyRecordPath(s.Config)
	if err := s.Files.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(s.Files.HostPath(path), append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("write the record of applies: %w", err)
	}
	return nil
}

// unchanged says whether live is the object the last apply of key
// returned, and that apply sent what sent holds.
func (r *applyRecord) unchanged(key string, sent []byte, live any) bool {
	r.mu.Lock()
	e, ok := r.entries[key]
	r.mu.Unlock()
	if !ok || e.Sent != hashOf(sent) {
		return false
	}
	result, err := json.Marshal(live)
	return err == nil && e.Result == hashOf(result)
}

// set records an apply of key: what it sent and what it got back.
func (r *applyRecord) set(key string, sent []byte, result any) {
	data, err := json.Marshal(result)
	if err != nil {
		return // not recorded: applied again next time
	}
	e := appliedObject{Sent: hashOf(sent), Result: hashOf(data)}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.entries[key] != e {
		r.entries[key] = e
		r.changed = true
	}
}

// hashOf is data's SHA-256 in hex.
func hashOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
