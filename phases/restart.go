package phases

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/health"
	"github.com/kubeboot/kubeboot/pki"
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
	if err := replaceManifest(ctx, s, data, listeners, instance{data: data, target: t}, s.Config.Timeouts.ControlPlane.Duration); err != nil {
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

// replaceManifest stops the running instance by moving its manifest out of
// the manifest dir, waits until it has stopped listening on stopping, then
// writes next's manifest and waits until that instance is healthy and
// serves its certificate file. Because the old instance is gone first, a
// healthy answer can only come from the new one. When the old one does not
// stop, current is put back. timeout bounds each of the two waits.
func replaceManifest(ctx context.Context, s *State, current []byte, stopping []listener, next instance, timeout time.Duration) error {
	path := s.Config.ManifestPath(next.target.Component)
	if err := s.Files.Remove(path); err != nil {
		return err
	}
	if err := waitStopped(ctx, s, stopping, timeout); err != nil {
		// The node must not be left without one of its components.
		if werr := s.Files.WriteFile(path, current, manifestMode); werr != nil {
			return fmt.Errorf("%w; restore manifest %q: %w", err, path, werr)
		}
		return err
	}
	if err := s.Files.WriteFile(path, next.data, manifestMode); err != nil {
		return err
	}
	probe, err := health.NewProbe(next.target, s.Files.HostPath)
	if err != nil {
		return err
	}
	if _, err := health.Wait(ctx, []health.Probe{probe}, health.WaitOptions{Timeout: timeout, ManifestsDir: s.Config.Paths.ManifestsDir}); err != nil {
		return err
	}
	return checkServedCert(ctx, s, next.target)
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
