package controlplane

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/health"
	"github.com/kubeboot/kubeboot/internal/procnet"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/templates"
)

// restartComponents restarts the named components one at a time, in start
// order (etcd, kube-apiserver, kube-controller-manager, kube-scheduler),
// then the CSR approver (config.NameCSRApprover, see restartCSRApprover)
// and the kubelet (pki.Kubelet) last, and returns once each is healthy
// again as a new instance. The kubelet goes last because one that has just
// started does not stop a static pod whose manifest goes in its first
// second until two minutes later: it waits for the pod's volumes, which it
// never mounts for a pod on its way out (kubelet v1.36.3, measured).
//
// A static pod is restarted by moving its manifest out of the manifest dir
// and back, byte for byte: the kubelet stops the pod when the file goes and
// starts a new one when it is back. An annotation bump would restart it
// too, but leave a manifest that differs from what kubeboot renders, so the
// next init would restart it again. The old instance is known to be gone
// when its ports are closed and its process has exited; the new one is the
// process started after the manifest came back (see waitInstance). Finally
// the new instance must serve the certificate file on disk, which proves
// it loaded the renewed one.
func restartComponents(ctx context.Context, s *phases.Node, names []string) error {
	if s.Options.DryRun || s.Options.Offline {
		s.Report.Infof("skipped the restart of %v: this run does not touch a live node", names)
		return nil
	}
	if _, err := s.Files.ReadFile(journalPath(s.Config)); err == nil {
		return fmt.Errorf("an upgrade was interrupted (%s): run `kubeboot upgrade apply` again to finish it before restarting components", journalPath(s.Config))
	}
	if err := phases.CheckNoRestore(s); err != nil {
		return err
	}
	pods, missing, err := phases.ManifestPods(s)
	if err != nil {
		return err
	}
	targets, err := health.Targets(s.Config, pods)
	if err != nil {
		return err
	}
	if err := checkProcessesVisible(targets); err != nil {
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
		listeners := phases.PodListeners(s, []templates.Manifest{{Component: name, Pod: pods[name]}})
		if err := restartOne(ctx, s, targets[i], listeners); err != nil {
			return err
		}
	}
	if slices.Contains(names, config.NameCSRApprover) {
		if err := restartCSRApprover(ctx, s); err != nil {
			return err
		}
	}
	if slices.Contains(names, pki.Kubelet) {
		return restartKubelet(ctx, s)
	}
	return nil
}

// restartCSRApprover restarts the CSR approver's static pod, as
// restartComponents restarts a component, and waits for a new instance
// to answer /healthz: the approver reads its kubeconfig only when it
// starts, and the file, mounted alone into its pod, is not replaced there
// when kubeboot replaces it on the node. Without the approver nothing is
// done.
func restartCSRApprover(ctx context.Context, s *phases.Node) error {
	if !s.Config.CSRApproverEnabled() || s.Options.DryRun || s.Options.Offline {
		return nil
	}
	path := s.Config.ManifestPath(config.NameCSRApprover)
	data, err := s.Files.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read manifest %q: %w", path, err)
	}
	pod, err := phases.DecodePod(path, data)
	if err != nil {
		return err
	}
	flags := health.CommandFlags(pod, config.NameCSRApprover)
	t := health.Target{Component: config.NameCSRApprover, Paths: []string{"/healthz"},
		Endpoints: []string{"http://" + net.JoinHostPort(flags["bind-address"], flags["health-port"])}}
	return restartOne(ctx, s, t, phases.PodListeners(s, []templates.Manifest{{Component: config.NameCSRApprover, Pod: pod}}))
}

// restartKubelet restarts kubelet.service, which loads its serving
// certificate and its kubeconfig only when it starts, and, when kubeboot
// issues that certificate (security.verifyKubeletServingCerts), waits
// until the kubelet serves the one on disk. Without systemd it says to.
func restartKubelet(ctx context.Context, s *phases.Node) error {
	if _, err := os.Stat(s.Files.HostPath(phases.SystemdRunDir)); err != nil {
		s.Report.Warnf("restart the kubelet yourself (e.g. `systemctl restart kubelet`): this node does not run systemd")
		return nil
	}
	if out, err := s.System.Systemctl(ctx, "restart", "kubelet"); err != nil {
		return fmt.Errorf("systemctl restart kubelet: %w: %s (see `journalctl -u kubelet`)", err, strings.TrimSpace(string(out)))
	}
	if !config.On(s.Config.Security.VerifyKubeletServingCerts) {
		s.Report.Infof("restarted kubelet.service")
		return nil
	}
	t := kubeletTarget(s)
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, s.Config.Timeouts.ControlPlane.Duration, true, func(ctx context.Context) (bool, error) {
		last = checkServedCert(ctx, s, t)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the kubelet, restarted, does not serve %s within timeouts.controlPlane: %w", t.ServerCertFile, errors.Join(err, last))
	}
	s.Report.Infof("restarted kubelet.service: it serves %s", t.ServerCertFile)
	return nil
}

// RestartRenewed restarts, as restartComponents does, the components that
// use what the run of s renewed (s.Renewed), and those still running since
// before a file they load last changed (staleRestarts: what an earlier
// run whose restarts failed partway left): the static pods whose
// manifests the run did not write (the kubelet restarts a pod whose
// manifest changed by itself), then the kubelet for its serving
// certificate. It is what makes a converging run with Options.Renew (init
// --renew, and bootstrap at every boot) leave no component on a
// certificate it replaced.
func RestartRenewed(ctx context.Context, s *phases.Node) error {
	renewed := renewedRestarts(s)
	stale, err := staleRestarts(s)
	if err != nil {
		return err
	}
	if len(renewed) > 0 {
		s.Report.Infof("restarting what uses the renewed %s: %v", strings.Join(s.Renewed, ", "), renewed)
	}
	var names []string
	for _, name := range append(config.ComponentNames, pki.Kubelet) {
		if slices.Contains(renewed, name) {
			names = append(names, name)
		} else if slices.Contains(stale, name) {
			s.Report.Infof("restarting %s: it runs since before a certificate or kubeconfig it loads changed", name)
			names = append(names, name)
		}
	}
	if slices.Contains(s.Renewed, config.KubeconfigCSRApprover) {
		names = append(names, config.NameCSRApprover)
	}
	if len(names) == 0 {
		return nil
	}
	return restartComponents(ctx, s, names)
}

// staleRestarts are the components of this node, in start order, that run
// a process started before a certificate or kubeconfig they load (see
// pki.Loads; for the kubelet, its serving certificate) last changed on
// disk, but the static pods whose manifests this run wrote (their kubelet
// restarts them). A component that does not run, or whose process cannot
// be seen, is not stale.
func staleRestarts(s *phases.Node) ([]string, error) {
	if s.Options.DryRun || s.Options.Offline {
		return nil, nil
	}
	pods, _, err := phases.ManifestPods(s)
	if err != nil {
		return nil, err
	}
	targets, err := health.Targets(s.Config, pods)
	if err != nil {
		return nil, err
	}
	return staleOf(s, append(targets, kubeletTarget(s)))
}

// kubeletTarget is how this node's kubelet is checked: its serving
// address, and the certificate kubeboot issues it.
func kubeletTarget(s *phases.Node) health.Target {
	host, port := phases.KubeletAddress(s.Config.Kubelet.ExtraConfig)
	if host == "" {
		host = s.Config.Node.AdvertiseAddress
	}
	return health.Target{Component: pki.Kubelet, Endpoints: []string{"https://" + net.JoinHostPort(host, strconv.Itoa(port))},
		CAFile: s.Config.CertPath(config.CertCA), ServerCertFile: s.Config.CertPath(config.CertKubeletServer)}
}

// staleOf is staleRestarts of the components that targets reach.
func staleOf(s *phases.Node, targets []health.Target) ([]string, error) {
	now, err := procnet.Now()
	if err != nil {
		return nil, err
	}
	wall := time.Now()
	written := s.Files.Changes().Written
	loads := pki.Loads(s.Config)
	var stale []string
	for _, t := range targets {
		if t.External || slices.Contains(written, s.Config.ManifestPath(t.Component)) {
			continue
		}
		p, err := instanceOf(t)
		if err != nil {
			continue
		}
		files := loads[t.Component]
		if t.Component == pki.Kubelet {
			// kubelet-finalize rewrites kubelet.conf under a running
			// kubelet, to name the certificate it already rotated to:
			// only its serving certificate needs a restart.
			files = []string{s.Config.CertPath(config.CertKubeletServer)}
		}
		for _, path := range files {
			info, err := os.Stat(s.Files.HostPath(path))
			if err != nil {
				continue
			}
			changed := procnet.Instant{BootID: now.BootID, SinceBoot: now.SinceBoot - wall.Sub(info.ModTime())}
			if !p.StartedAfter(changed) {
				stale = append(stale, t.Component)
				break
			}
		}
	}
	return stale, nil
}

// renewedRestarts are what RestartRenewed restarts, in start order: the
// static pods, then the kubelet when its serving certificate was renewed
// (kubelet-start restarts it for the files it reads at start, its
// kubeconfig among them; restarted before the static pods, it would be
// slow to stop the first of them, minutes in the lab).
func renewedRestarts(s *phases.Node) []string {
	written := s.Files.Changes().Written
	var names []string
	for _, name := range pki.Restarts(s.Config, s.Renewed) {
		switch {
		case name == pki.Kubelet:
			if slices.Contains(s.Renewed, config.CertKubeletServer) {
				names = append(names, name)
			}
		case !slices.Contains(written, s.Config.ManifestPath(name)):
			names = append(names, name)
		}
	}
	return names
}

// restartOne moves one manifest out and back, and waits for the new instance.
func restartOne(ctx context.Context, s *phases.Node, t health.Target, listeners []phases.Listener) error {
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
	st := stoppingNow(s, listeners)
	if err := s.Files.Remove(path); err != nil {
		return err
	}
	timeout := s.Config.Timeouts.ControlPlane.Duration
	if err := waitStopped(ctx, s.Run, st, timeout); err != nil {
		// The node must not be left without one of its components.
		if werr := s.Files.WriteFile(path, data, phases.ManifestMode); werr != nil {
			return fmt.Errorf("restart %s: %w; restore manifest %q: %w", name, err, path, werr)
		}
		return fmt.Errorf("restart %s: %w", name, err)
	}
	back, err := procnet.Now()
	if err != nil {
		return err
	}
	if err := s.Files.WriteFile(path, data, phases.ManifestMode); err != nil {
		return err
	}
	if err := waitInstance(ctx, s, t, startedAfter(back), timeout); err != nil {
		return fmt.Errorf("restart %s: %w", name, err)
	}
	if t.ServerCertFile == "" {
		s.Report.Infof("%s restarted: a new instance is healthy", name)
	} else {
		s.Report.Infof("%s restarted: a new instance is healthy and serves %s", name, t.ServerCertFile)
	}
	return s.Files.Remove(backup)
}

// backupManifest copies a manifest into the backups dir and returns the copy's path.
func backupManifest(s *phases.Node, component string, data []byte) (string, error) {
	backup := filepath.Join(phases.BackupsDir(s.Config), component+".yaml")
	if err := s.Files.MkdirAll(phases.BackupsDir(s.Config), phases.ManifestDirMode); err != nil {
		return "", err
	}
	return backup, s.Files.WriteFile(backup, data, phases.ManifestMode)
}

// instance is one manifest of a component and where it is checked.
type instance struct {
	data   []byte
	target health.Target
}

// instanceRule says whether the process serving a component is the
// instance a step waits for, and if not, why.
type instanceRule func(p procnet.Process) error

// startedAfter accepts an instance that started after since: the kubelet
// started it from a manifest written since.
func startedAfter(since procnet.Instant) instanceRule {
	return func(p procnet.Process) error {
		if !p.StartedAfter(since) {
			return fmt.Errorf("the instance that was running before (%s) still answers: the kubelet has not started one from the new manifest yet", p)
		}
		return nil
	}
}

// rolledBack accepts, after the previous manifest went back at rollback,
// an instance that runs it: one from before the step began at started
// (the kubelet never replaced it) or one started after the rollback. One
// started in between runs the manifest that failed.
func rolledBack(started, rollback procnet.Instant) instanceRule {
	return func(p procnet.Process) error {
		if !p.StartedAfter(started) || p.StartedAfter(rollback) {
			return nil
		}
		return fmt.Errorf("the instance of the failed manifest (%s) still answers: the kubelet has not started one from the previous manifest yet", p)
	}
}

// waitInstance waits until the component's instance that rule accepts is
// healthy, then checks that it serves its certificate file.
//
// An instance is the process listening on the checked address, told apart
// by its start time (see procnet): the kubelet starts a new process for a
// changed manifest, so an old instance that keeps answering, such as one
// the kubelet has not replaced yet, never passes. This works the same
// whoever runs the kubelet, needs neither the API server (which
// may be the component being replaced) nor a version change, and survives
// a crash of kubeboot: an upgrade step's start is kept in its journal. The
// process is read before and after the health check, so the answer is
// known to come from it.
func waitInstance(ctx context.Context, s *phases.Node, t health.Target, rule instanceRule, timeout time.Duration) error {
	probe, err := health.NewProbe(t, s.Files.HostPath)
	if err != nil {
		return err
	}
	check := probe.Check
	probe.Check = func(ctx context.Context) error {
		before, beforeErr := instanceOf(t)
		if err := check(ctx); err != nil {
			return err
		}
		if beforeErr != nil {
			return beforeErr
		}
		after, err := instanceOf(t)
		if err != nil {
			return err
		}
		if after != before {
			return fmt.Errorf("another instance (%s) took over during the check", after)
		}
		return rule(after)
	}
	if _, err := health.Wait(ctx, []health.Probe{probe}, health.WaitOptions{Timeout: timeout, ManifestsDir: s.Config.Paths.ManifestsDir}); err != nil {
		return err
	}
	return checkServedCert(ctx, s, t)
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

// checkProcessesVisible fails when this process cannot see the process
// behind a component's socket (see procnet.ErrNotVisible): kubeboot could
// then not tell a new instance from the old one, and each step would only
// time out. A component that does not listen at the moment proves nothing
// either way and is passed over. One component seen is enough: the
// components' containers all run in PID namespaces the container runtime
// makes under its own, so a process that sees one sees them all; and each
// look reads the socket tables and every process's open files.
func checkProcessesVisible(targets []health.Target) error {
	for _, t := range targets {
		if t.External {
			continue
		}
		_, err := instanceOf(t)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, procnet.ErrNotVisible):
			return fmt.Errorf("cannot tell the %s instances apart: %w", t.Component, err)
		}
	}
	return nil
}

// checkServedCert fails unless the component serves its certificate file.
func checkServedCert(ctx context.Context, s *phases.Node, t health.Target) error {
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
