package phases

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/health"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/procnet"
	"github.com/kubeboot/kubeboot/templates"
)

// backupsDir holds copies of manifests while they are out of the
// manifest dir; it is outside that dir, so the kubelet never runs them.
func backupsDir(c *config.ClusterConfiguration) string {
	return filepath.Join(c.Paths.KubeconfigDir, "kubeboot", "backups")
}

// RestartComponents restarts the named components one at a time, in start
// order (etcd, kube-apiserver, kube-controller-manager, kube-scheduler),
// and returns once each is healthy again as a new instance.
//
// A static pod is restarted by moving its manifest out of the manifest dir
// and back, byte for byte: the kubelet stops the pod when the file goes and
// starts a new one when it is back. An annotation bump would restart it
// too, but leave a manifest that differs from what kubeboot renders, so the
// next init would restart it again. The old instance is known to be gone
// when its ports are closed; after that, a healthy answer can only come
// from the new one. Finally the new instance must serve the certificate
// file on disk, which proves it loaded the renewed one.
func RestartComponents(ctx context.Context, s *State, names []string) error {
	if s.Options.DryRun || s.Options.Offline {
		s.Report.Infof("skipped the restart of %v: this run does not touch a live node", names)
		return nil
	}
	pods, missing, err := manifestPods(s)
	if err != nil {
		return err
	}
	targets, err := health.Targets(s.Config, pods)
	if err != nil {
		return err
	}
	for _, name := range config.ComponentNames {
		if !slices.Contains(names, name) {
			continue
		}
		if slices.Contains(missing, filepath.Base(s.Config.ManifestPath(name))) {
			return fmt.Errorf("restart %s: %s not found: run `kubeboot init phase write-manifests` first", name, s.Config.ManifestPath(name))
		}
		i := slices.IndexFunc(targets, func(t health.Target) bool { return t.Component == name })
		if i < 0 {
			return fmt.Errorf("restart %s: it does not run on this node", name)
		}
		listeners := podListeners(s, []templates.Manifest{{Component: name, Pod: pods[name]}})
		if err := restartOne(ctx, s, targets[i], listeners); err != nil {
			return err
		}
	}
	if slices.Contains(names, pki.Kubelet) {
		s.Report.Warnf("restart the kubelet yourself (e.g. `systemctl restart kubelet`): it is not a static pod")
	}
	return nil
}

// restartOne moves one manifest out and back, and waits for the new instance.
func restartOne(ctx context.Context, s *State, t health.Target, listeners []listener) error {
	name := t.Component
	path := s.Config.ManifestPath(name)
	data, err := s.Files.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read manifest %q: %w", path, err)
	}
	// The copy outside the manifest dir survives a crash while the manifest
	// is out; init (write-manifests) also restores it from the staged copy.
	backup, err := backupManifest(s, name, data)
	if err != nil {
		return err
	}
	s.Report.Infof("restarting %s: its manifest is out of %s until it has stopped (copy in %s)", name, s.Config.Paths.ManifestsDir, backup)
	st := stoppingNow(listeners)
	if err := s.Files.Remove(path); err != nil {
		return err
	}
	timeout := s.Config.Timeouts.ControlPlane.Duration
	if err := waitStopped(ctx, s, st, timeout); err != nil {
		// The node must not be left without one of its components.
		if werr := s.Files.WriteFile(path, data, manifestMode); werr != nil {
			return fmt.Errorf("restart %s: %w; restore manifest %q: %w", name, err, path, werr)
		}
		return fmt.Errorf("restart %s: %w", name, err)
	}
	back := time.Now()
	if err := s.Files.WriteFile(path, data, manifestMode); err != nil {
		return err
	}
	if err := waitNewInstance(ctx, s, t, back, timeout); err != nil {
		return fmt.Errorf("restart %s: %w", name, err)
	}
	s.Report.Infof("%s restarted: a new instance is healthy and serves %s", name, t.ServerCertFile)
	return s.Files.Remove(backup)
}

// backupManifest copies a manifest into the backups dir and returns the copy's path.
func backupManifest(s *State, component string, data []byte) (string, error) {
	backup := filepath.Join(backupsDir(s.Config), component+".yaml")
	if err := s.Files.MkdirAll(backupsDir(s.Config), manifestDirMode); err != nil {
		return "", err
	}
	return backup, s.Files.WriteFile(backup, data, manifestMode)
}

// instance is one manifest of a component and where it is checked.
type instance struct {
	data   []byte
	target health.Target
}

// waitNewInstance waits until an instance of t's component that started
// after since is healthy, then checks that it serves its certificate file.
//
// An instance is the process listening on the checked address, told apart
// by its start time (see procnet): the kubelet starts a new process for a
// changed manifest, so an old instance that keeps answering, such as one
// the kubelet has not replaced yet, never passes. This works the same
// under the kubelet and in the lab, needs neither the API server (which
// may be the component being replaced) nor a version change, and survives
// a crash of kubeboot: since is kept in the upgrade journal.
func waitNewInstance(ctx context.Context, s *State, t health.Target, since time.Time, timeout time.Duration) error {
	probe, err := health.NewProbe(t, s.Files.HostPath)
	if err != nil {
		return err
	}
	check := probe.Check
	probe.Check = func(ctx context.Context) error {
		if err := check(ctx); err != nil {
			return err
		}
		return checkStartedAfter(t, since)
	}
	if _, err := health.Wait(ctx, []health.Probe{probe}, health.WaitOptions{Timeout: timeout, ManifestsDir: s.Config.Paths.ManifestsDir}); err != nil {
		return err
	}
	return checkServedCert(ctx, s, t)
}

// checkStartedAfter fails unless the process listening on t's address
// started after since. procnet's start times may read up to a tick early.
func checkStartedAfter(t health.Target, since time.Time) error {
	p, err := instanceOf(t)
	if err != nil {
		return err
	}
	if p.Started.Before(since.Add(-procnet.Tick)) {
		return fmt.Errorf("%s still answers from the instance that was running before (%s): the kubelet has not started one from the new manifest yet", t.Endpoints[0], p)
	}
	return nil
}

// instanceOf returns the process listening on t's first endpoint.
func instanceOf(t health.Target) (procnet.Process, error) {
	if len(t.Endpoints) == 0 {
		return procnet.Process{}, fmt.Errorf("%s: no address to check", t.Component)
	}
	u, err := url.Parse(t.Endpoints[0])
	if err != nil {
		return procnet.Process{}, fmt.Errorf("%s: parse %q: %w", t.Component, t.Endpoints[0], err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return procnet.Process{}, fmt.Errorf("%s: no port in %q", t.Component, t.Endpoints[0])
	}
	return procnet.Listener(u.Hostname(), port)
}

// checkServedCert fails unless the component serves its certificate file.
func checkServedCert(ctx context.Context, s *State, t health.Target) error {
	if t.ServerCertFile == "" {
		return nil
	}
	file, err := s.Files.ReadFile(t.ServerCertFile)
	if err != nil {
		return fmt.Errorf("read serving certificate %q: %w", t.ServerCertFile, err)
	}
	block, _ := pem.Decode(file)
	if block == nil {
		return fmt.Errorf("read serving certificate %q: no PEM block", t.ServerCertFile)
	}
	served, err := health.ServedCertificate(ctx, t, s.Files.HostPath)
	if err != nil {
		return err
	}
	if !bytes.Equal(served.Raw, block.Bytes) {
		return errors.New("the new instance serves certificate serial " + served.SerialNumber.String() + ", not the one in " + t.ServerCertFile)
	}
	return nil
}
