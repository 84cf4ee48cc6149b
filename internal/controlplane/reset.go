package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/pki"
)

// ResetOptions are the choices of `kubeboot reset`.
type ResetOptions struct {
	// KeepPKI leaves the certificates, keys and encryption configuration.
	KeepPKI bool
	// Force removes the etcd data dir without asking.
	Force bool
	// Confirm, when set, asks the operator whether the etcd data dir may go;
	// without Force or a yes, reset refuses before removing anything.
	Confirm func(question string) bool
}

// resetResult is what reset removed and what it left on purpose.
type resetResult struct {
	// Removed are node paths that existed and are gone (or would go).
	Removed []string `json:"removed"`
	// Left describes what reset does not own or was told to keep.
	Left []string `json:"left"`
}

// resetNode undoes init on this node, file by file, in an order that never
// pulls files from under a running component: first the manifests (the
// control plane's, then etcd's, each time until the kubelet has stopped
// the components: their ports closed and their processes gone), then the
// kubelet's certificates, the kubeconfigs, configuration, PKI and etcd
// data; the runtime's pods go once the kubelet has stopped
// (phases.RemovePods), and last kubeboot's pod network
// (phases.ResetPodNetwork).
func resetNode(ctx context.Context, s *phases.Node, opts ResetOptions) (resetResult, error) {
	c := s.Config
	var res resetResult
	if err := phases.CheckNoRestore(s); err != nil {
		return res, err
	}
	if err := checkEtcdDataDir(s); err != nil {
		return res, err
	}
	if err := confirmEtcdData(s, opts); err != nil {
		return res, err
	}
	// A joined node leaves the etcd cluster while its member still runs, so
	// the others stop counting on it; reaching here means the operator
	// agreed to lose this member's data.
	if c.Etcd.Local != nil && !s.Options.DryRun && !s.Options.Offline && etcdRunning(s) {
		if err := leaveEtcd(ctx, s, opts.Force); err != nil {
			return res, err
		}
	}
	rm := func(path string, all bool) error { return resetRemove(s, &res, path, all) }
	if err := stopStaticPods(ctx, s, rm); err != nil {
		return res, err
	}
	if err := removeLeftovers(s, &res, c.Paths.ManifestsDir); err != nil {
		return res, err
	}
	// The static pods are gone: the kubelet, which stopped them, goes too.
	host, port := phases.KubeletAddress(c.Kubelet.ExtraConfig)
	dropIn, err := phases.StopKubelet(ctx, s.Run, host, port)
	if err != nil {
		return res, err
	}
	if dropIn != "" {
		res.Removed = append(res.Removed, dropIn)
	}
	podsLeft, err := phases.RemovePods(ctx, s.Run, c.Kubelet.ContainerRuntimeEndpoint)
	res.Left = append(res.Left, podsLeft...)
	if err != nil {
		return res, err
	}
	units, err := phases.RemoveRenewalTimer(ctx, s.Run)
	res.Removed = append(res.Removed, units...)
	if err != nil {
		return res, err
	}
	certs, err := phases.KubeletCerts(s.Run, c.Kubelet.CertDir)
	if err != nil {
		return res, err
	}
	for _, path := range certs {
		if err := rm(path, false); err != nil {
			return res, err
		}
	}

	var files []string
	names := pki.KubeconfigNames(c)
	if !slices.Contains(names, config.KubeconfigCSRApprover) {
		// An earlier run, with the approver on, may have written it.
		names = append(names, config.KubeconfigCSRApprover)
	}
	for _, name := range names {
		files = append(files, c.KubeconfigPath(name))
	}
	files = append(files, c.Kubelet.ConfigFile)
	for _, path := range files {
		if err := rm(path, false); err != nil {
			return res, err
		}
	}
	if err := removeLeftovers(s, &res, c.Paths.KubeconfigDir); err != nil {
		return res, err
	}
	for _, d := range ownedDirs(c) {
		if err := removeOwned(s, &res, d); err != nil {
			return res, err
		}
	}
	if opts.KeepPKI {
		res.Left = append(res.Left, c.Certificates.Dir+": kept (--keep-pki)")
	} else if err := resetPKI(s, &res); err != nil {
		return res, err
	}
	if c.Etcd.Local != nil {
		// Again, right before it goes: the node may have changed since.
		if err := checkEtcdDataDir(s); err != nil {
			return res, err
		}
		if err := rm(c.Etcd.Local.DataDir, true); err != nil {
			return res, err
		}
		// The data of a member a rejoin left, which an interrupted join
		// may have kept: it holds the cluster's Secrets too.
		if err := checkOnlyEtcdData(s, c.EtcdLeftDir()); err != nil {
			return res, err
		}
		if err := rm(c.EtcdLeftDir(), true); err != nil {
			return res, err
		}
		if list, err := etcd.ListSnapshots(ctx, s.Files.HostPath(c.Etcd.Local.SnapshotsDir)); err == nil && len(list) > 0 {
			res.Left = append(res.Left, fmt.Sprintf("the etcd snapshots in %s (%d): kept, they are the cluster's backups (`kubeboot etcd restore --snapshot` brings one back; remove them yourself)", c.Etcd.Local.SnapshotsDir, len(list)))
		}
	}
	removed, left, err := phases.ResetPodNetwork(ctx, s.Run, c.Kubelet.ContainerRuntimeEndpoint)
	res.Removed, res.Left = append(res.Removed, removed...), append(res.Left, left...)
	if err != nil {
		return res, err
	}
	res.Left = append(res.Left,
		"the kubelet's own state but its certificates, and the manifest dir "+c.Paths.ManifestsDir+"; a kubelet that kubelet.service does not run stays running",
		"iptables, nftables and IPVS rules: kubeboot does not own them",
		"the audit logs in "+c.Security.Audit.LogDir)
	return res, nil
}

// stopStaticPods removes the static pods' manifests with rm, in reverse
// start order, each group once the kubelet has stopped the one before: the
// API server stops while its storage still answers, so it shuts down at
// once instead of at the kubelet's SIGKILL. kubeboot's own pods' manifests
// go even when the configuration turns them off, since an earlier run may
// have written them.
func stopStaticPods(ctx context.Context, s *phases.Node, rm func(path string, all bool) error) error {
	c := s.Config
	listeners, err := phases.PlannedListeners(s)
	if err != nil {
		return err
	}
	first := append(slices.Clone(config.KubebootPods), config.NameScheduler, config.NameControllerManager, config.NameAPIServer)
	for _, group := range [][]string{first, {config.NameEtcd}} {
		group = slices.DeleteFunc(group, func(name string) bool {
			return !slices.Contains(config.KubebootPods, name) && !slices.Contains(phases.Components(c), name)
		})
		st := stoppingNow(s, slices.DeleteFunc(slices.Clone(listeners), func(l phases.Listener) bool { return !slices.Contains(group, l.Component) }))
		for _, name := range group {
			if err := rm(c.ManifestPath(name), false); err != nil {
				return err
			}
		}
		if !s.Options.DryRun && !s.Options.Offline && len(group) > 0 {
			if err := waitStopped(ctx, s.Run, st, c.Timeouts.ControlPlane.Duration); err != nil {
				return err
			}
		}
	}
	return nil
}

// confirmEtcdData refuses to go on, before anything is removed, when the
// etcd data dir holds data and neither Force nor the operator allows
// removing it: that is the cluster's state, and no backup is made here.
func confirmEtcdData(s *phases.Node, opts ResetOptions) error {
	if s.Config.Etcd.Local == nil || opts.Force {
		return nil
	}
	dir := s.Config.Etcd.Local.DataDir
	entries, err := os.ReadDir(s.Files.HostPath(dir))
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(entries) == 0) {
		return nil
	}
	if opts.Confirm != nil && opts.Confirm(fmt.Sprintf("remove the etcd data dir %s, and with it the cluster's state?", dir)) {
		return nil
	}
	return fmt.Errorf("reset would remove the etcd data dir %s, which holds the cluster's state: re-run with --force to remove it (back it up first with `kubeboot etcd snapshot save`)", dir)
}

// checkEtcdDataDir refuses to remove an etcd data dir that is not
// empty and holds anything but an etcd member's data (member/ with snap/
// and wal/): reset removes the data dir whole, and a configuration that
// names a directory of someone else's, such as /var/lib/dpkg, must not
// take it with it. A missing data dir is fine.
func checkEtcdDataDir(s *phases.Node) error {
	if s.Config.Etcd.Local == nil {
		return nil
	}
	dir := s.Config.Etcd.Local.DataDir
	foreign, err := foreignInEtcdData(s.Files.HostPath(dir))
	var unreadable *unreadableEtcdData
	switch {
	case errors.As(err, &unreadable) && unreadable.member:
		return notEtcdData(dir, "has a member/ that cannot be read: "+unreadable.err.Error())
	case errors.As(err, &unreadable):
		return notEtcdData(dir, "cannot be read as a directory: "+unreadable.err.Error())
	case foreign != "":
		return notEtcdData(dir, "holds "+foreign)
	}
	return nil
}

// foreignInEtcdData is the first entry of the etcd data dir at host (a
// host path) that etcd did not write, relative to the dir, or "" when it
// holds only etcd's data or does not exist. etcd writes member/ and in it
// snap/, wal/ (elsewhere with --wal-dir) and the wal.tmp/ of a member
// killed while it made its first WAL. A directory it cannot read is an
// *unreadableEtcdData.
func foreignInEtcdData(host string) (string, error) {
	entries, err := os.ReadDir(host)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	case err != nil:
		return "", &unreadableEtcdData{err: err}
	}
	for _, e := range entries {
		if e.Name() != "member" || !e.IsDir() {
			return e.Name(), nil
		}
		member, err := os.ReadDir(filepath.Join(host, "member"))
		if err != nil {
			return "", &unreadableEtcdData{member: true, err: err}
		}
		for _, m := range member {
			if !slices.Contains([]string{"snap", "wal", "wal.tmp"}, m.Name()) || !m.IsDir() {
				return "member/" + m.Name(), nil
			}
		}
	}
	return "", nil
}

// unreadableEtcdData is an etcd data dir, or its member/, that cannot be
// read.
type unreadableEtcdData struct {
	member bool
	err    error
}

func (e *unreadableEtcdData) Error() string { return e.err.Error() }

func (e *unreadableEtcdData) Unwrap() error { return e.err }

// notEtcdData is the refusal of checkEtcdDataDir, an exit-2 error that
// names the field and the fix.
func notEtcdData(dir, why string) error {
	return &exit.UsageError{Msg: fmt.Sprintf("etcd.local.dataDir: %s %s, which is not an etcd data dir (only member/ with snap/, wal/ or wal.tmp/): "+
		"reset removes the data dir with everything in it, so it removes nothing; check etcd.local.dataDir in the configuration, "+
		"or empty the directory yourself if it is etcd's", dir, why)}
}

// resetRemove removes one path and records it when it was there.
func resetRemove(s *phases.Node, res *resetResult, path string, all bool) error {
	// The path itself, not what a symlink there points to.
	host := filepath.Join(s.Files.HostPath(filepath.Dir(path)), filepath.Base(path))
	if _, err := os.Lstat(host); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	remove := s.Files.Remove
	if all {
		remove = s.Files.RemoveAll
	}
	if err := remove(path); err != nil {
		return err
	}
	res.Removed = append(res.Removed, path)
	// A dry run's writer has said "would remove" already.
	if !s.Options.DryRun {
		s.Report.Infof("removed %s", path)
	}
	return nil
}

// removeLeftovers removes the dot temp files an interrupted write left.
func removeLeftovers(s *phases.Node, res *resetResult, dir string) error {
	removed, err := files.RemoveTempFiles(s.Files, dir)
	for _, path := range removed {
		res.Removed = append(res.Removed, path)
		if !s.Options.DryRun {
			s.Report.Infof("removed %s, left by an interrupted write", path)
		}
	}
	return err
}

// ownedDir is a directory kubeboot creates and what it writes there: the
// files, and names matching patterns for the timestamped ones.
type ownedDir struct {
	dir      string
	files    []string
	patterns []string
}

// ownedDirs are the directories reset empties of kubeboot's files and then
// removes, children before parents: the API server's configuration, and
// under kubeboot/ the staged manifests, the backups, the upgrade journal
// and the record of applies.
func ownedDirs(c *config.ClusterConfiguration) []ownedDir {
	apiserver := ownedDir{dir: c.APIServerConfigDir(), files: []string{c.AdmissionConfigPath(), c.AuthenticationConfigPath()}}
	// Whatever the config says now, these are the names kubeboot writes
	// there, unless the user's own audit policy has that path.
	if policy := filepath.Join(c.APIServerConfigDir(), config.FileAuditPolicy); c.Security.Audit.PolicyFile != policy {
		apiserver.files = append(apiserver.files, policy)
	}
	own := filepath.Join(c.Paths.KubeconfigDir, "kubeboot")
	staged := ownedDir{dir: filepath.Join(own, "staged")}
	backups := ownedDir{dir: phases.BackupsDir(c), files: []string{journalPath(c)}, patterns: []string{"etcd-snapshot-*.db"}}
	for _, name := range config.StaticPodNames {
		staged.files = append(staged.files, filepath.Join(staged.dir, name+".yaml"))
		backups.files = append(backups.files, filepath.Join(backups.dir, name+".yaml"), filepath.Join(backups.dir, name+".before-upgrade.yaml"))
	}
	return []ownedDir{apiserver, staged, backups, {dir: own, files: []string{phases.ApplyRecordPath(c)}}}
}

// removeOwned removes kubeboot's files in d, then d when nothing else is
// in it.
func removeOwned(s *phases.Node, res *resetResult, d ownedDir) error {
	paths := d.files
	entries, err := os.ReadDir(s.Files.HostPath(d.dir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read directory %q: %w", d.dir, err)
	}
	for _, e := range entries {
		if slices.ContainsFunc(d.patterns, func(p string) bool { ok, _ := filepath.Match(p, e.Name()); return ok }) {
			paths = append(paths, filepath.Join(d.dir, e.Name()))
		}
	}
	for _, path := range paths {
		if err := resetRemove(s, res, path, false); err != nil {
			return err
		}
	}
	if err := removeLeftovers(s, res, d.dir); err != nil {
		return err
	}
	return removeIfEmpty(s, res, d.dir)
}

// removeIfEmpty removes dir when all it holds is what reset removed (in a
// dry run, would remove), and otherwise lists each entry it leaves.
func removeIfEmpty(s *phases.Node, res *resetResult, dir string) error {
	entries, err := os.ReadDir(s.Files.HostPath(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read directory %q: %w", dir, err)
	}
	kept := false
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if slices.Contains(res.Removed, path) {
			continue
		}
		kept = true
		// A directory of kubeboot's that stays is there for what it holds,
		// which is listed already.
		if !slices.ContainsFunc(res.Left, func(l string) bool { return strings.HasPrefix(l, path+"/") }) {
			res.Left = append(res.Left, path+": not written by kubeboot")
		}
	}
	if kept {
		return nil
	}
	return resetRemove(s, res, dir, false)
}

// resetPKI removes every certificate, key and the encryption configuration,
// the controller-manager's signing certificate and what a CA rotation
// stopped midway left (phases.RotationStash), then the PKI directories
// when nothing else is in them.
func resetPKI(s *phases.Node, res *resetResult) error {
	c := s.Config
	pkiDir := ownedDir{dir: c.Certificates.Dir, files: []string{c.KeyPath(config.KeyServiceAccount), c.PublicKeyPath(config.KeyServiceAccount), c.EncryptionConfigPath(),
		c.CertPath(config.CertCASigner), phases.RotationStash(c)}}
	etcdDir := ownedDir{dir: filepath.Dir(c.CertPath(config.CertEtcdCA))}
	for _, spec := range pki.CertSpecs(c) {
		for _, path := range []string{c.CertPath(spec.Name), c.KeyPath(spec.Name)} {
			if filepath.Dir(path) == etcdDir.dir {
				etcdDir.files = append(etcdDir.files, path)
			} else {
				pkiDir.files = append(pkiDir.files, path)
			}
		}
	}
	if err := removeOwned(s, res, etcdDir); err != nil {
		return err
	}
	return removeOwned(s, res, pkiDir)
}

// etcdRunning says whether the local etcd member answers on its client
// port, so reset only talks to a member that is there.
func etcdRunning(s *phases.Node) bool {
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(etcd.ClientURL(s.Config), "https://"), time.Second)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// leaveEtcd removes this node's stacked etcd member from its cluster (see
// etcd.Leave), before reset stops the local etcd and deletes its data dir.
// It connects to this member, which reset has seen answering, with the API
// server's etcd client certificate. A node without a local etcd has nothing
// to do; force removes the member even when that breaks the cluster's
// quorum.
func leaveEtcd(ctx context.Context, s *phases.Node, force bool) error {
	if s.Config.Etcd.Local == nil {
		return nil
	}
	cli, err := etcd.New(ctx, []string{etcd.ClientURL(s.Config)}, etcd.LocalTLS(s.Config, s.Files.HostPath))
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	return etcd.Leave(ctx, cli, s.Config.Node.Name, etcd.PeerURL(s.Config), force, s.Report)
}
