package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/health"
	"github.com/kubeboot/kubeboot/internal/procnet"
	"github.com/kubeboot/kubeboot/internal/staticpod"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/templates"
)

// upgradePrepare is the part of init that `upgrade apply` runs before the
// manifests: the files components read at start converge first (nothing
// reads them before its restart), then each manifest is replaced in turn.
var upgradePrepare = workflow.Runner[*phases.Node]{Phases: []workflow.Phase[*phases.Node]{phases.Certs, phases.Kubeconfig, phases.KubeletConfig, phases.APIServerConfig}}

// journal records how far an upgrade got, so that a re-run after a crash
// completes the step it was in.
type journal struct {
	// Component is the component whose manifest is being replaced.
	Component string `json:"component"`
	// Backup is the previous manifest's copy.
	Backup string `json:"backup"`
	// Time is when the step began, for people.
	Time time.Time `json:"time"`
	// Started is when the step began, before the new manifest was written:
	// an instance that started later runs the new manifest.
	Started procnet.Instant `json:"started"`
	// RollbackStarted, when set, is when the previous manifest started to
	// go back, after the new instance failed.
	RollbackStarted *procnet.Instant `json:"rollbackStarted,omitempty"`
}

// newJournal starts the journal of a step.
func newJournal(component, backup string) (journal, error) {
	now, err := procnet.Now()
	return journal{Component: component, Backup: backup, Time: time.Now(), Started: now}, err
}

// startRollback records that the previous manifest goes back from now on.
func (j *journal) startRollback() error {
	now, err := procnet.Now()
	j.RollbackStarted = &now
	return err
}

func journalPath(c *config.ClusterConfiguration) string {
	return filepath.Join(phases.BackupsDir(c), "upgrade-journal.json")
}

// upgradeApply moves the running control plane to what the configuration
// renders, one component at a time in start order. Before the first change
// of a run it saves an etcd snapshot: a new API server may rewrite stored
// objects too, so the restore point must come before any component
// changes. (A re-run after a crash saves one of the state it finds.) Each
// changed component's manifest is backed up outside the manifest dir and
// replaced atomically, so the kubelet always has one manifest per
// component; the step succeeds once a new instance is healthy (see
// waitInstance). When it is not, the previous manifest goes back and
// must be healthy again, and the upgrade stops with the new instance's
// diagnostic. A journal in the backups dir lets a re-run finish a step a
// crash interrupted. On a node that joined the cluster, etcd keeps the
// membership it joined with (s.Membership, see phases.ReadEtcdMembership).
// Then the cluster's objects move to the new release (see
// upgradeClusterObjects), and last the node's kubelet (upgradeKubelet).
//
// timeout bounds each wait for a component to become healthy; 0 means
// timeouts.controlPlane. It is not the configuration's field because that
// one is rendered into the manifests' probes.
func upgradeApply(ctx context.Context, s *phases.Node, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = s.Config.Timeouts.ControlPlane.Duration
	}
	kubelet, err := upgradeControlPlane(ctx, s, timeout)
	if err != nil {
		return err
	}
	if err := upgradeClusterObjects(ctx, s, timeout); err != nil {
		return err
	}
	return upgradeKubelet(ctx, s, kubelet, timeout)
}

// upgradeNode is `kubeboot upgrade node` on a control-plane node other
// than the first: once `upgrade apply` has moved the cluster's
// configuration (kube-system/kubeadm-config) to this node's
// kubernetesVersion, it upgrades the node's control plane as upgrade
// apply does, then the addons when it was the last node behind (see
// upgradeAddons), then the kubelet. It uploads no configuration: the
// first node's is the cluster's.
func upgradeNode(ctx context.Context, s *phases.Node, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = s.Config.Timeouts.ControlPlane.Duration
	}
	client, err := phases.APIClient(s)
	if err != nil {
		return err
	}
	cluster, err := phases.ClusterVersion(ctx, client)
	if err != nil {
		return err
	}
	if cluster != s.Config.KubernetesVersion {
		return &exit.UsageError{Msg: fmt.Sprintf("kube-system/kubeadm-config names kubernetesVersion %s, this node's configuration %s: run `kubeboot upgrade apply` on the first control-plane node first, with its configuration at %s",
			cluster, s.Config.KubernetesVersion, s.Config.KubernetesVersion)}
	}
	kubelet, err := upgradeControlPlane(ctx, s, timeout)
	if err != nil {
		return err
	}
	if err := upgradeAddons(ctx, s, timeout); err != nil {
		return err
	}
	return upgradeKubelet(ctx, s, kubelet, timeout)
}

// upgradeKubelet moves the node's kubelet, as upgradeControlPlane found
// it, to the binary the operator installed and the configuration
// upgradePrepare wrote (see phases.UpgradeKubelet).
func upgradeKubelet(ctx context.Context, s *phases.Node, kubelet phases.Kubelet, timeout time.Duration) error {
	client, err := phases.APIClient(s)
	if err != nil {
		return err
	}
	return phases.UpgradeKubelet(ctx, s.Run, client, kubelet, s.Config.Node.Name, s.Config.Kubelet.ConfigFile, timeout)
}

// upgradeControlPlane replaces each changed manifest of the node in turn,
// as upgradeApply describes, after an etcd snapshot. It returns the
// node's kubelet as it found it (see checkKubeletSkew).
func upgradeControlPlane(ctx context.Context, s *phases.Node, timeout time.Duration) (phases.Kubelet, error) {
	if err := phases.CheckNoRestore(s); err != nil {
		return phases.Kubelet{}, err
	}
	// Learning the kubelet's release may take starting its binary (see
	// phases.KubeletRelease), which takes longer than the rest of an
	// upgrade with nothing to change: the check runs while the steps
	// before the preflight do.
	client, err := phases.APIClient(s)
	if err != nil {
		return phases.Kubelet{}, err
	}
	var kubelet phases.Kubelet
	kubeletSkew := inBackground(func() (err error) {
		kubelet, err = checkKubeletSkew(ctx, s, client)
		return err
	})
	err = upgradeManifests(ctx, s, timeout, kubeletSkew)
	// kubelet is set once the check is done: a failed upgrade waits for
	// it too.
	if skew := kubeletSkew(); err == nil {
		err = skew
	}
	return kubelet, err
}

// upgradeManifests is upgradeControlPlane's work once the kubelet's check
// (kubeletSkew, which the preflight waits for) has started.
func upgradeManifests(ctx context.Context, s *phases.Node, timeout time.Duration, kubeletSkew func() error) error {
	if err := resumeUpgrade(ctx, s, timeout); err != nil {
		return err
	}
	have, err := readManifests(s)
	if err != nil {
		return err
	}
	// The node's pods are decoded, a YAML parse each, only as they are
	// needed: the API server's for the skew check, the others only once a
	// manifest changes.
	apiserver, err := decodeManifest(s, have, config.NameAPIServer)
	if err != nil {
		return err
	}
	current := sync.OnceValues(func() (map[string]*corev1.Pod, error) {
		pods := map[string]*corev1.Pod{}
		for _, name := range phases.Components(s.Config) {
			pod, err := decodeManifest(s, have, name)
			if err != nil {
				return nil, err
			}
			pods[name] = pod
		}
		return pods, nil
	})
	// Rendering takes as long as the preflight's requests wait: both at
	// once, until the preflight asks whether a manifest changes.
	var wanted map[string]*corev1.Pod
	var data map[string][]byte
	rendered := inBackground(func() (err error) {
		wanted, data, err = wantedPods(s, have)
		return err
	})
	changing := func() (bool, error) {
		if err := rendered(); err != nil {
			return false, err
		}
		return manifestsChange(s, have, data)
	}
	if err := upgradePreflight(ctx, s, apiserver, current, kubeletSkew, changing); err != nil {
		_ = rendered()
		return err
	}
	if err := rendered(); err != nil {
		return err
	}
	if _, err := upgradePrepare.Run(ctx, s, nil); err != nil {
		return err
	}
	var oldTargets, newTargets []health.Target
	changed := 0
	for _, name := range phases.Components(s.Config) {
		path := s.Config.ManifestPath(name)
		old, ok := have[name]
		if !ok {
			return fmt.Errorf("read manifest %q: %w", path, fs.ErrNotExist)
		}
		if string(old) == string(data[name]) {
			continue
		}
		if same, err := samePod(old, data[name]); err != nil || same {
			if err == nil {
				// The kubelet names a static pod by its content, not its
				// bytes: no new instance will come, so none is waited for.
				err = s.Files.WriteFile(path, data[name], phases.ManifestMode)
			}
			if err != nil {
				return err
			}
			continue
		}
		changed++
		if changed == 1 {
			pods, err := current()
			if err != nil {
				return err
			}
			if oldTargets, err = health.Targets(s.Config, pods); err != nil {
				return err
			}
			if newTargets, err = health.Targets(s.Config, wanted); err != nil {
				return err
			}
			// Each step tells the new instance from the old by the process
			// behind the socket: that must work before the first change.
			// Checked only when something changes, since it reads the
			// socket tables and every process's open files, which took
			// most of a converged upgrade apply's time.
			if err := checkProcessesVisible(oldTargets); err != nil {
				return err
			}
			if s.Config.Etcd.Local != nil {
				if err := saveEtcdSnapshot(ctx, s, targetOf(oldTargets, config.NameEtcd)); err != nil {
					return err
				}
			}
		}
		prev := instance{data: old, target: targetOf(oldTargets, name)}
		next := instance{data: data[name], target: targetOf(newTargets, name)}
		if err := upgradeOne(ctx, s, timeout, prev, next); err != nil {
			return err
		}
	}
	wrote, err := upgradeKubebootPods(s, have, data)
	if err != nil {
		return err
	}
	if changed == 0 && !wrote {
		s.Report.Infof("every manifest is up to date")
	}
	return nil
}

// inBackground starts f in a goroutine and returns the wait for its
// error, which may be called more than once. f must only read the run's
// state.
func inBackground(f func() error) func() error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return sync.OnceValue(func() error { return <-done })
}

// upgradeKubebootPods writes the manifests of kubeboot's own pods (the CSR
// approver, the etcd snapshot schedule) as rendered, after the
// components, and removes those the configuration turns off; have holds
// the node's manifests (see readManifests). Nothing waits for them: they
// are no control-plane components, the control plane works without them,
// and the kubelet restarts each from its new manifest. It says whether it
// changed the manifest dir.
func upgradeKubebootPods(s *phases.Node, have, data map[string][]byte) (bool, error) {
	wrote := false
	for _, name := range config.KubebootPods {
		path := s.Config.ManifestPath(name)
		old, found := have[name]
		want, enabled := data[name]
		switch {
		case !enabled:
			wrote = wrote || found
			continue
		case found && bytes.Equal(old, want):
			continue
		}
		if err := s.Files.WriteFile(path, want, phases.ManifestMode); err != nil {
			return false, err
		}
		s.Report.Infof("wrote %s: the kubelet starts %s from it; nothing waits for it", path, name)
		wrote = true
	}
	return wrote, phases.RemoveDisabledManifests(s)
}

// targetOf picks a component's target; Targets returns one per component.
func targetOf(targets []health.Target, name string) health.Target {
	for _, t := range targets {
		if t.Component == name {
			return t
		}
	}
	return health.Target{Component: name}
}

// readManifests reads the node's manifests of the control-plane
// components and kubeboot's pods, by name; a missing one is left out. The
// upgrade reads them once, before it writes any.
func readManifests(s *phases.Node) (map[string][]byte, error) {
	have := map[string][]byte{}
	for _, name := range slices.Concat(phases.Components(s.Config), config.KubebootPods) {
		path := s.Config.ManifestPath(name)
		data, err := s.Files.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("read manifest %q: %w", path, err)
		default:
			have[name] = data
		}
	}
	return have, nil
}

// decodeManifest decodes the node's manifest of the component name, from
// have (see readManifests).
func decodeManifest(s *phases.Node, have map[string][]byte, name string) (*corev1.Pod, error) {
	path := s.Config.ManifestPath(name)
	data, ok := have[name]
	if !ok {
		return nil, fmt.Errorf("%s not found: run `kubeboot init phase write-manifests` first", path)
	}
	return phases.DecodePod(path, data)
}

// wantedPods renders, patches and validates the manifests; a manifest the
// kubelet would reject stops the upgrade before anything is touched. Only
// a manifest other than the node's (have, see readManifests) is
// validated: it is the only kind the upgrade writes, and a validation
// decodes the manifest again, a few milliseconds each.
func wantedPods(s *phases.Node, have map[string][]byte) (map[string]*corev1.Pod, map[string][]byte, error) {
	manifests, err := phases.RenderPods(s)
	if err != nil {
		return nil, nil, err
	}
	pods, data := map[string]*corev1.Pod{}, map[string][]byte{}
	var results []staticpod.Result
	for _, m := range manifests {
		b, err := templates.Marshal(m.Pod)
		if err != nil {
			return nil, nil, err
		}
		if old, ok := have[m.Component]; !ok || !bytes.Equal(old, b) {
			results = append(results, s.ValidateManifest(m.Component+".yaml", b))
		}
		pods[m.Component], data[m.Component] = m.Pod, b
	}
	return pods, data, staticpod.Err(results)
}

// manifestsChange says whether a component's manifest on the node (in
// have, see readManifests) would change to what data holds in a way the
// kubelet sees (see samePod).
func manifestsChange(s *phases.Node, have, data map[string][]byte) (bool, error) {
	for _, name := range phases.Components(s.Config) {
		old, ok := have[name]
		if !ok {
			return false, fmt.Errorf("read manifest %q: %w", s.Config.ManifestPath(name), fs.ErrNotExist)
		}
		if string(old) == string(data[name]) {
			continue
		}
		if same, err := samePod(old, data[name]); err != nil || !same {
			return err == nil, err
		}
	}
	return false, nil
}

// samePod says whether two manifests decode to the same pod; the kubelet
// restarts a static pod only when that changes, not for comments or layout.
func samePod(a, b []byte) (bool, error) {
	podA, err := phases.DecodePod("the current manifest", a)
	if err != nil {
		return false, err
	}
	podB, err := phases.DecodePod("the new manifest", b)
	if err != nil {
		return false, err
	}
	return reflect.DeepEqual(podA, podB), nil
}

// upgradeOne backs up prev's manifest, journals the step and writes next's
// manifest over it, then finishes the step (see finishStep).
func upgradeOne(ctx context.Context, s *phases.Node, timeout time.Duration, prev, next instance) error {
	name := next.target.Component
	backup, err := backupManifest(s, name+".before-upgrade", prev.data)
	if err != nil {
		return err
	}
	j, err := newJournal(name, backup)
	if err != nil {
		return err
	}
	if err := writeJournal(s, j); err != nil {
		return err
	}
	s.Report.Infof("upgrading %s (previous manifest in %s)", name, backup)
	if err := s.Files.WriteFile(s.Config.ManifestPath(name), next.data, phases.ManifestMode); err != nil {
		return err
	}
	return finishStep(ctx, s, timeout, j, prev, next)
}

// finishStep waits for next's instance started after the step began; when
// it is not healthy, prev's manifest goes back (journaled first) and must
// run healthy again: the rollback is verified, not assumed. The journal
// goes once the node runs a verified manifest. An interrupted wait (the
// operator's Ctrl-C) is no failure: it keeps the journal for the re-run.
func finishStep(ctx context.Context, s *phases.Node, timeout time.Duration, j journal, prev, next instance) error {
	upErr := waitInstance(ctx, s, next.target, startedAfter(j.Started), timeout)
	if upErr == nil {
		s.Report.Infof("%s upgraded: a new instance is healthy", j.Component)
		return s.Files.Remove(journalPath(s.Config))
	}
	if ctx.Err() != nil {
		return interrupted(j, ctx.Err())
	}
	s.Report.Warnf("%s: the new instance failed; rolling back to %s", j.Component, j.Backup)
	if err := j.startRollback(); err != nil {
		return err
	}
	if err := writeJournal(s, j); err != nil {
		return err
	}
	if err := s.Files.WriteFile(s.Config.ManifestPath(j.Component), prev.data, phases.ManifestMode); err != nil {
		return fmt.Errorf("upgrade %s: %w\nrollback failed too: %w (the previous manifest is in %s)", j.Component, upErr, err, j.Backup)
	}
	return verifyRollback(ctx, s, timeout, j, prev, upErr)
}

// verifyRollback waits until prev's manifest runs healthy again, then
// forgets the step and returns the failure that caused the rollback.
func verifyRollback(ctx context.Context, s *phases.Node, timeout time.Duration, j journal, prev instance, cause error) error {
	if err := waitInstance(ctx, s, prev.target, rolledBack(j.Started, *j.RollbackStarted), timeout); err != nil {
		if ctx.Err() != nil {
			return interrupted(j, ctx.Err())
		}
		return fmt.Errorf("upgrade %s: %w\nrollback failed too: %w (the previous manifest is in %s)", j.Component, cause, err, j.Backup)
	}
	if err := s.Files.Remove(journalPath(s.Config)); err != nil {
		return err
	}
	return fmt.Errorf("upgrade %s: %w\nrolled back: the previous manifest is in place again and healthy", j.Component, cause)
}

// interrupted is the error of a step cut short; its journal stays.
func interrupted(j journal, err error) error {
	return fmt.Errorf("upgrade %s interrupted (%w): run `kubeboot upgrade apply` again to finish the step", j.Component, err)
}

// resumeUpgrade finishes the step a crashed (or interrupted) upgrade was
// in, as the journal tells:
//   - a rollback had begun: the previous manifest goes back, if the crash
//     came before that, and must run healthy (see verifyRollback);
//   - the new manifest is in the manifest dir: the instance started after
//     the step began must be healthy, or the step rolls back (finishStep);
//   - the previous manifest still is: the crash came before the write, and
//     the pass that follows does the step.
func resumeUpgrade(ctx context.Context, s *phases.Node, timeout time.Duration) error {
	data, err := s.Files.ReadFile(journalPath(s.Config))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read upgrade journal %q: %w", journalPath(s.Config), err)
	}
	var j journal
	if err := json.Unmarshal(data, &j); err != nil {
		return fmt.Errorf("read upgrade journal %q (remove it if no upgrade is under way): %w", journalPath(s.Config), err)
	}
	prevData, err := s.Files.ReadFile(j.Backup)
	if err != nil {
		return fmt.Errorf("read previous manifest %q: %w", j.Backup, err)
	}
	path := s.Config.ManifestPath(j.Component)
	nextData, err := s.Files.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read manifest %q: %w", path, err)
	}
	if j.RollbackStarted == nil && string(nextData) == string(prevData) {
		return s.Files.Remove(journalPath(s.Config))
	}
	s.Report.Infof("resuming the interrupted upgrade of %s (started %s)", j.Component, j.Time.Format(time.RFC3339))
	pods, _, err := phases.ManifestPods(s)
	if err != nil {
		return err
	}
	nextTargets, err := health.Targets(s.Config, pods)
	if err != nil {
		return err
	}
	if err := checkProcessesVisible(nextTargets); err != nil {
		return err
	}
	if pods[j.Component], err = phases.DecodePod(j.Backup, prevData); err != nil {
		return err
	}
	prevTargets, err := health.Targets(s.Config, pods)
	if err != nil {
		return err
	}
	prev := instance{data: prevData, target: targetOf(prevTargets, j.Component)}
	next := instance{data: nextData, target: targetOf(nextTargets, j.Component)}
	if j.RollbackStarted == nil {
		return finishStep(ctx, s, timeout, j, prev, next)
	}
	if string(nextData) != string(prevData) {
		// The crash came before the previous manifest went back: from now
		// on, an instance that starts runs it.
		if err := j.startRollback(); err != nil {
			return err
		}
		if err := writeJournal(s, j); err != nil {
			return err
		}
		if err := s.Files.WriteFile(path, prevData, phases.ManifestMode); err != nil {
			return err
		}
	}
	return verifyRollback(ctx, s, timeout, j, prev, errors.New("its new instance had failed before the interruption"))
}

func writeJournal(s *phases.Node, j journal) error {
	data, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("encode upgrade journal: %w", err)
	}
	return s.Files.WriteFile(journalPath(s.Config), data, phases.ManifestMode)
}

// saveEtcdSnapshot writes a consistent snapshot into the backups dir,
// outside the manifest dir and the data dir.
func saveEtcdSnapshot(ctx context.Context, s *phases.Node, t health.Target) error {
	files := etcd.TLSFiles{CA: s.Files.HostPath(t.CAFile), Cert: s.Files.HostPath(t.CertFile), Key: s.Files.HostPath(t.KeyFile)}
	snap, err := etcd.Snapshot(ctx, t.Endpoints[0], files)
	if err != nil {
		return err
	}
	path := filepath.Join(phases.BackupsDir(s.Config), "etcd-snapshot-"+time.Now().UTC().Format("20060102T150405Z")+".db")
	if err := s.Files.MkdirAll(phases.BackupsDir(s.Config), phases.ManifestDirMode); err != nil {
		return err
	}
	if err := s.Files.WriteFile(path, snap, 0o600); err != nil {
		return err
	}
	s.Report.Infof("saved an etcd snapshot (%d bytes) to %s", len(snap), path)
	return nil
}
