package phases

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kubeboot/kubeboot/internal/addonmanifests"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/cri"
	"github.com/kubeboot/kubeboot/internal/health"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/templates"
)

// Check is one preflight check.
type Check struct {
	// Name is what --ignore-preflight-errors takes, like "Port-6443".
	Name string
	// WarnOnly checks are warnings unless --strict is given.
	WarnOnly bool
	// Run returns the problem with its fix, or nil.
	Run func(ctx context.Context) error
}

// Preflight checks the node before anything is written.
var Preflight = workflow.Phase[*Node]{
	Name:  "preflight",
	Short: "Check that this node can run the control plane",
	Run:   runPreflight,
}

func runPreflight(ctx context.Context, s *Node) error {
	// The user's manifests are read now, so that a file that does not
	// parse stops the run before anything is written; where they go is
	// checked against the cluster when they are applied.
	if _, err := addonmanifests.Read(s.Config.Addons.Manifests, s.Files.HostPath); err != nil {
		return err
	}
	checks, err := preflightChecks(s)
	if err != nil {
		return err
	}
	return RunChecks(ctx, s.Run, checks)
}

// RunChecks runs every check and reports each failure: a warning when
// --ignore-preflight-errors names it or it is WarnOnly (without
// --strict), else an error event. It fails if any check failed, naming
// them all.
func RunChecks(ctx context.Context, s *workflow.Run, checks []Check) error {
	var failed []string
	for _, c := range checks {
		err := c.Run(ctx)
		if err == nil {
			continue
		}
		ignored := slices.Contains(s.Options.IgnorePreflightErrors, "all") || slices.Contains(s.Options.IgnorePreflightErrors, strings.ToLower(c.Name))
		if ignored || (c.WarnOnly && !s.Options.Strict) {
			s.Report.Warnf("%s: %v", c.Name, err)
			continue
		}
		s.Report.Event(output.Event{Level: output.LevelError, Msg: fmt.Sprintf("%s: %v", c.Name, err), Fields: map[string]any{"check": c.Name}})
		failed = append(failed, c.Name)
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
func preflightChecks(s *Node) ([]Check, error) {
	checks := []Check{{Name: "ManifestDir", WarnOnly: true, Run: hostCheck(s, checkManifestDir)}}
	if s.Options.Offline {
		return checks, nil
	}
	checks = append(checks, Check{Name: "IsPrivilegedUser", Run: hostCheck(s, checkPrivileged)})
	for _, c := range HostChecks(s.Run, ThisHost(), ClusterNeeds(s.Config)) {
		// A dry run changes nothing, so this machine need not be ready
		// for the node yet: it is told what to fix (--strict fails it).
		c.WarnOnly = s.Options.DryRun
		checks = append(checks, c)
	}
	listeners, err := PlannedListeners(s)
	if err != nil {
		return nil, err
	}
	for _, l := range listeners {
		checks = append(checks, Check{Name: "Port-" + l.Port, Run: func(context.Context) error { return checkPort(s, l) }})
	}
	if slices.ContainsFunc(config.KubebootPods, s.Config.KubebootPodEnabled) {
		checks = append(checks, Check{Name: "KubebootBinary", WarnOnly: s.Options.DryRun,
			Run: func(context.Context) error { return CheckKubebootBinary(s.System.Kubeboot.Binary) }})
	}
	if s.Config.Etcd.Local != nil {
		checks = append(checks, Check{Name: "EtcdDataDir", Run: hostCheck(s, checkEtcdDataDir)},
			Check{Name: "EtcdRestore", Run: hostCheck(s, CheckNoRestore)})
	}
	return append(checks, Check{Name: "ImagePull", Run: func(ctx context.Context) error { return checkImages(ctx, s) }}), nil
}

// hostCheck adapts a check of s that only looks at files and ports, and
// so never waits, to the checks' signature.
func hostCheck(s *Node, check func(s *Node) error) func(context.Context) error {
	return func(context.Context) error { return check(s) }
}

// imageCheckTimeout bounds the image check: a runtime that does not answer
// in time fails it, rather than hanging init.
const imageCheckTimeout = 30 * time.Second

// checkImages names every image of Images (the static pods' and the
// enabled addons') that the node's container runtime lacks: without it, a
// missing image shows only as a component that never gets healthy. A runtime that is not running yet is
// a warning: the kubelet needs it, but it may be started after this check.
func checkImages(ctx context.Context, s *Node) error {
	needed, err := Images(s)
	if err != nil {
		return err
	}
	endpoint := s.Config.Kubelet.ContainerRuntimeEndpoint
	images, err := cri.Dial(endpoint, s.Files.HostPath)
	if errors.Is(err, cri.ErrNoRuntime) {
		s.Report.Warnf("ImagePull: cannot check the images: %v; start the runtime before the kubelet", err)
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { _ = images.Close() }()
	ctx, cancel := context.WithTimeout(ctx, imageCheckTimeout)
	defer cancel()
	missing, err := images.Missing(ctx, needed)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("the container runtime at %s lacks %d image(s): %s: pull them with `kubeboot images pull`, or on an air-gapped node load their archives into the runtime",
			endpoint, len(missing), strings.Join(missing, ", "))
	}
	return nil
}

func checkPrivileged(s *Node) error {
	// A dry run writes nothing, so it needs no privileges.
	if s.Options.DryRun || os.Geteuid() == 0 {
		return nil
	}
	return errors.New("writing " + s.Config.Paths.KubeconfigDir + " needs root: run as root, or render offline with --root DIR")
}

// Listener is an address a component will listen on.
type Listener struct {
	// Component is the component that listens.
	Component string
	// Host and Port are the address, as in the component's flags.
	Host, Port string
}

// PlannedListeners reads the addresses the components will listen on from
// the pods as they will be rendered, patches and extra args included.
func PlannedListeners(s *Node) ([]Listener, error) {
	manifests, err := RenderPods(s)
	if err != nil {
		return nil, err
	}
	return PodListeners(s, manifests), nil
}

// PodListeners reads the addresses the given pods listen on.
func PodListeners(s *Node, manifests []templates.Manifest) []Listener {
	var listeners []Listener
	for _, m := range manifests {
		flags := health.CommandFlags(m.Pod, m.Component)
		if m.Component == config.NameEtcd {
			for _, name := range []string{"listen-client-urls", "listen-peer-urls", "listen-metrics-urls"} {
				for _, raw := range strings.Split(flags[name], ",") {
					if u, err := url.Parse(raw); err == nil && u.Port() != "" {
						listeners = append(listeners, Listener{m.Component, u.Hostname(), u.Port()})
					}
				}
			}
			continue
		}
		port := map[string]string{
			config.NameAPIServer:         strconv.Itoa(int(s.Config.APIServer.BindPort)),
			config.NameControllerManager: strconv.Itoa(config.PortControllerManager),
			config.NameScheduler:         strconv.Itoa(config.PortScheduler),
			config.NameCSRApprover:       strconv.Itoa(config.PortCSRApprover),
			config.NameEtcdSnapshots:     strconv.Itoa(config.PortEtcdSnapshots),
		}[m.Component]
		portFlag := "secure-port"
		if slices.Contains(config.KubebootPods, m.Component) {
			portFlag = "health-port"
		}
		if p := flags[portFlag]; p != "" {
			port = p
		}
		listeners = append(listeners, Listener{m.Component, flags["bind-address"], port})
	}
	return listeners
}

// checkPort fails when the listener's address is taken. An address in use
// is fine when our own component's manifest is there: that is a re-run.
func checkPort(s *Node, l Listener) error {
	addr := net.JoinHostPort(l.Host, l.Port)
	if ip := net.ParseIP(l.Host); l.Host == "" || ip != nil && ip.IsUnspecified() {
		addr = ":" + l.Port // every address
	}
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln.Close()
	}
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		if _, statErr := os.Stat(s.Files.HostPath(s.Config.ManifestPath(l.Component))); statErr == nil {
			return nil
		}
		return fmt.Errorf("%s is in use, and not by a %s of ours: stop whatever listens there (`ss -ltnp 'sport = :%s'`)", addr, l.Component, l.Port)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Errorf("%s of %s is not an address of this host: set node.advertiseAddress to one of this host's IPs (`ip -brief addr`)", l.Host, l.Component)
	}
	return fmt.Errorf("listen on %s: %w", addr, err)
}

// checkManifestDir warns about files the kubelet would run besides ours.
func checkManifestDir(s *Node) error {
	foreign, err := foreignManifests(s)
	if err != nil || len(foreign) == 0 {
		return err
	}
	return fmt.Errorf("%s holds files the kubelet will also run as static pods: %s; move them out of the directory unless they are meant to run",
		s.Config.Paths.ManifestsDir, strings.Join(foreign, ", "))
}

// checkEtcdDataDir accepts an empty data dir, or one that this node's etcd
// manifest already uses (a re-run); anything else belongs to another cluster.
func checkEtcdDataDir(s *Node) error {
	dir := s.Config.Etcd.Local.DataDir
	entries, err := os.ReadDir(s.Files.HostPath(dir))
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(entries) == 0) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read etcd data dir %q: %w", dir, err)
	}
	manifest, err := s.Files.ReadFile(s.Config.ManifestPath(config.NameEtcd))
	if err == nil && strings.Contains(string(manifest), "--data-dir="+filepath.Clean(dir)+"\n") {
		return nil
	}
	return fmt.Errorf("etcd data dir %s is not empty and no etcd manifest of this node uses it: it belongs to another cluster; remove it (`rm -rf %s`) or set etcd.local.dataDir", dir, dir)
}

// CheckKubebootBinary fails unless path, the kubeboot that kubeboot's own
// pods run inside the pause image, is a statically linked ELF executable:
// the image holds no libc for a dynamically linked one.
func CheckKubebootBinary(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("kubeboot's own pods run this node's kubeboot, %s, which is no ELF executable: %w (install the kubeboot package)", path, err)
	}
	defer func() { _ = f.Close() }()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("kubeboot's own pods run this node's kubeboot, %s, inside the pause image, which holds no libc, but it is dynamically linked: install the kubeboot package, or build it with CGO_ENABLED=0 (as `make build` does)", path)
		}
	}
	return nil
}
