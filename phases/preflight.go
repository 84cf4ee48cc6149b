package phases

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/kubeboot/kubeboot/config"
)

// check is one preflight check. It returns a problem with its fix, or nil.
type check struct {
	name string
	// warnOnly checks are warnings unless --strict is given.
	warnOnly bool
	run      func(s *State) error
}

// Preflight checks the node before anything is written.
var Preflight = Phase{
	Name:  "preflight",
	Short: "Check that this node can run the control plane",
	Run:   runPreflight,
}

func runPreflight(_ context.Context, s *State) error {
	var failed []string
	for _, c := range preflightChecks(s) {
		err := c.run(s)
		if err == nil {
			continue
		}
		ignored := slices.Contains(s.Options.IgnorePreflightErrors, "all") || slices.Contains(s.Options.IgnorePreflightErrors, strings.ToLower(c.name))
		if ignored || (c.warnOnly && !s.Options.Strict) {
			s.Report.Warnf("%s: %v", c.name, err)
			continue
		}
		s.Report.Event(Event{Level: LevelError, Msg: fmt.Sprintf("%s: %v", c.name, err), Fields: map[string]any{"check": c.name}})
		failed = append(failed, c.name)
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d preflight check(s) failed: %s (fix them, or skip with --ignore-preflight-errors=%s)",
			len(failed), strings.Join(failed, ", "), strings.Join(failed, ","))
	}
	s.Report.Infof("all checks passed")
	return nil
}

// preflightChecks lists the checks for this run. Offline renders (--root)
// describe another machine, so this host's ports and data are not checked.
func preflightChecks(s *State) []check {
	checks := []check{{name: "ManifestDir", warnOnly: true, run: checkManifestDir}}
	if s.Options.Offline {
		return checks
	}
	checks = append(checks, check{name: "IsPrivilegedUser", run: checkPrivileged})
	for _, p := range ownedPorts(s.Config) {
		checks = append(checks, check{name: "Port-" + strconv.Itoa(p.port), run: func(s *State) error {
			return checkPort(s, s.Config.Node.AdvertiseAddress, p.port, p.component)
		}})
	}
	if s.Config.Etcd.Local != nil {
		checks = append(checks, check{name: "EtcdDataDir", run: checkEtcdDataDir})
	}
	return checks
}

func checkPrivileged(s *State) error {
	// A dry run writes nothing, so it needs no privileges.
	if s.Options.DryRun || os.Geteuid() == 0 {
		return nil
	}
	return errors.New("writing " + s.Config.Paths.KubeconfigDir + " needs root: run as root, or render offline with --root DIR")
}

// ownedPort is a port the control plane will listen on, and its owner.
type ownedPort struct {
	port      int
	component string
}

func ownedPorts(c *config.ClusterConfiguration) []ownedPort {
	ports := []ownedPort{{int(c.APIServer.BindPort), config.NameAPIServer}, {10257, config.NameControllerManager}, {10259, config.NameScheduler}}
	if c.Etcd.Local != nil {
		ports = append(ports, ownedPort{2379, config.NameEtcd}, ownedPort{2380, config.NameEtcd})
	}
	return ports
}

// checkPort fails when port is taken on address. A port in use is fine when
// our own component's manifest is there: that is a re-run.
func checkPort(s *State, address string, port int, component string) error {
	addr := net.JoinHostPort(address, strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err == nil {
		return l.Close()
	}
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		if _, statErr := os.Stat(s.Files.HostPath(s.Config.ManifestPath(component))); statErr == nil {
			return nil
		}
		return fmt.Errorf("port %d on %s is in use, and not by a %s of ours: stop whatever listens there (`ss -ltnp 'sport = :%d'`)", port, address, component, port)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Errorf("advertise address %s is not on this host: set node.advertiseAddress to one of this host's IPs (`ip -brief addr`)", address)
	}
	return fmt.Errorf("listen on %s: %w", addr, err)
}

// checkManifestDir warns about files the kubelet would run besides ours.
func checkManifestDir(s *State) error {
	foreign, err := foreignManifests(s)
	if err != nil || len(foreign) == 0 {
		return err
	}
	return fmt.Errorf("%s holds files the kubelet will also run as static pods: %s; move them out of the directory unless they are meant to run",
		s.Config.Paths.ManifestsDir, strings.Join(foreign, ", "))
}

// checkEtcdDataDir accepts an empty data dir, or one that this node's etcd
// manifest already uses (a re-run); anything else belongs to another cluster.
func checkEtcdDataDir(s *State) error {
	dir := s.Config.Etcd.Local.DataDir
	entries, err := os.ReadDir(s.Files.HostPath(dir))
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(entries) == 0) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read etcd data dir %q: %w", dir, err)
	}
	manifest, err := os.ReadFile(s.Files.HostPath(s.Config.ManifestPath(config.NameEtcd)))
	if err == nil && strings.Contains(string(manifest), "--data-dir="+filepath.Clean(dir)+"\n") {
		return nil
	}
	return fmt.Errorf("etcd data dir %s is not empty and no etcd manifest of this node uses it: it belongs to another cluster; remove it (`rm -rf %s`) or set etcd.local.dataDir", dir, dir)
}
