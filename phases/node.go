package phases

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/health"
	"github.com/kubeboot/kubeboot/internal/staticpod"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/templates"
)

// Node is the data of the workflows that run a control-plane node's
// phases: init, join --control-plane, and the day-2 operations on such a
// node. Nothing in it is a worker's.
type Node struct {
	*workflow.Run
	// Config is the node's configuration as config.Load returned it:
	// read-only.
	Config *config.ClusterConfiguration
	// Membership is how the node's local etcd member belongs to its cluster:
	// read from the node (NewNode), and set by the etcd-join phase when
	// the member joins.
	Membership templates.EtcdMembership
	// Healthy collects the components the wait phase saw healthy.
	Healthy []string
	// JoinCommand is the command that joins a node to this cluster, with
	// the bootstrap token in it: the bootstrap-token phase sets it for the
	// run's result, and nothing may print it elsewhere.
	JoinCommand string
	// CertificateKey is the key upload-certs generated (--upload-certs
	// without certificateKey), for the run's result only: it opens the
	// kubeadm-certs Secret.
	CertificateKey string
	// Snapshot is the etcd snapshot the run saved and verified, for the
	// run's result; nil when it saved none.
	Snapshot *etcd.SnapshotInfo
	// Renewed are the certificates and kubeconfigs that existed and that
	// this run renewed (Options.Renew), by name: the components that use
	// them still run with the old ones (see pki.Restarts).
	Renewed []string
	// validated are the manifests this run validated, by a hash of their
	// file name and bytes (see ValidateManifest), guarded by validatedMu:
	// Render validates its manifests concurrently.
	validated   map[[sha256.Size]byte]staticpod.Result
	validatedMu sync.Mutex
}

// ValidateManifest is staticpod.Validate of the manifest file holding
// data on this node, done once per run for the same bytes: render,
// validate and write-manifests each check the manifests they are given,
// since each may run alone, and a run of all three checks the same ones.
func (s *Node) ValidateManifest(file string, data []byte) staticpod.Result {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(file), []byte(s.Config.Node.Name), data} {
		_, _ = fmt.Fprintf(h, "%d:", len(part))
		_, _ = h.Write(part)
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])
	s.validatedMu.Lock()
	res, ok := s.validated[key]
	s.validatedMu.Unlock()
	if ok {
		return res
	}
	res = staticpod.Validate(file, data, s.Config.Node.Name)
	s.validatedMu.Lock()
	defer s.validatedMu.Unlock()
	if s.validated == nil {
		s.validated = map[[sha256.Size]byte]staticpod.Result{}
	}
	s.validated[key] = res
	return res
}

// NewNode is the data of a run of run's workflow on the control-plane node
// cfg describes, with the node's facts read from the node: its etcd
// member's membership (ReadEtcdMembership). Every workflow on a
// control-plane node starts from it.
func NewNode(run *workflow.Run, cfg *config.ClusterConfiguration) (*Node, error) {
	m, err := ReadEtcdMembership(run, cfg)
	if err != nil {
		return nil, err
	}
	return &Node{Run: run, Config: cfg, Membership: m}, nil
}

// ReadEtcdMembership reads how the node's etcd member belongs to its
// cluster from the etcd manifest on the node: a member that joined an
// existing cluster (--initial-cluster-state=existing) keeps the
// --initial-cluster it joined with, so that a re-render neither rewrites
// the manifest (which would restart etcd) because members joined since,
// nor tells the member to found a new cluster. No manifest, a founding
// member or an external etcd: the zero membership. So that reset and
// restore still work on a broken node, a manifest that does not decode
// is only warned about, and taken for a founding member's.
func ReadEtcdMembership(run *workflow.Run, cfg *config.ClusterConfiguration) (templates.EtcdMembership, error) {
	if cfg.Etcd.Local == nil {
		return templates.EtcdMembership{}, nil
	}
	path := cfg.ManifestPath(config.NameEtcd)
	data, err := run.Files.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return templates.EtcdMembership{}, nil
	}
	if err != nil {
		return templates.EtcdMembership{}, fmt.Errorf("read etcd manifest %q: %w", path, err)
	}
	pod, err := decodeCommands(path, data)
	if err != nil {
		run.Report.Warnf("%v: its etcd member is taken for one that founded its cluster", err)
		return templates.EtcdMembership{}, nil
	}
	flags := health.CommandFlags(pod, config.NameEtcd)
	if flags["initial-cluster-state"] != "existing" {
		return templates.EtcdMembership{}, nil
	}
	return templates.EtcdMembership{InitialCluster: flags["initial-cluster"]}, nil
}

// decodeCommands decodes, of the manifest at path, its containers' names,
// commands and args alone: a Pod with just those, which is all a reader of
// a component's flags looks at. Every init, join and upgrade apply reads
// the etcd manifest so; decoding it whole, every field of a Pod, made a
// converged re-run of init 1.6 ms (3%) slower, measured side by side.
func decodeCommands(path string, data []byte) (*corev1.Pod, error) {
	var manifest struct {
		Spec struct {
			Containers []struct {
				Name    string   `json:"name"`
				Command []string `json:"command"`
				Args    []string `json:"args"`
			} `json:"containers"`
		} `json:"spec"`
	}
	if err := decodeManifest(path, data, &manifest); err != nil {
		return nil, err
	}
	pod := &corev1.Pod{}
	for _, c := range manifest.Spec.Containers {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c.Name, Command: c.Command, Args: c.Args})
	}
	return pod, nil
}

// BackupsDir holds copies of manifests while they are out of the manifest
// dir (an upgrade's, a restart's, a restore's), and their journals; it is
// outside that dir, so the kubelet never runs them.
func BackupsDir(c *config.ClusterConfiguration) string {
	return filepath.Join(c.Paths.KubeconfigDir, "kubeboot", "backups")
}

// RestoreJournalPath is the node path of the journal of an `etcd restore`
// under way: while it is there, nothing else may write the manifests.
func RestoreJournalPath(c *config.ClusterConfiguration) string {
	return filepath.Join(BackupsDir(c), "restore-journal.json")
}

// CheckNoRestore refuses to go on while a restore of the node's etcd is
// under way: a command that writes the manifests or removes the node's
// files would undo or break it.
func CheckNoRestore(s *Node) error {
	if s.Config.Etcd.Local == nil {
		return nil
	}
	if _, err := s.Files.ReadFile(RestoreJournalPath(s.Config)); err == nil {
		return fmt.Errorf("a restore of this node's etcd was interrupted (%s): run `kubeboot etcd restore` again with the same --snapshot to finish it first", RestoreJournalPath(s.Config))
	}
	return nil
}

// Result is r with the components the run on n saw healthy (none is an
// empty list).
func (n *Node) Result(r workflow.Result) workflow.Result {
	r.Healthy = append([]string{}, n.Healthy...)
	return r
}

// InitResult is the result of init and of its phases: a Result, and what
// a joinable control plane hands on.
type InitResult struct {
	workflow.Result
	// JoinCommand joins a node to the cluster; it holds a bootstrap token.
	JoinCommand string `json:"joinCommand,omitempty"`
	// CertificateKey opens the kubeadm-certs Secret: the key init's
	// upload-certs generated, for join --control-plane --certificate-key.
	CertificateKey string `json:"certificateKey,omitempty"`
}

// InitResult is the init result of the run on n, r its common part.
func (n *Node) InitResult(r workflow.Result) InitResult {
	return InitResult{Result: n.Result(r), JoinCommand: n.JoinCommand, CertificateKey: n.CertificateKey}
}
