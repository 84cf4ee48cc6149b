package phases

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/cri"
	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/health"
	"github.com/kubeboot/kubeboot/internal/inputfile"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/workflow"
)

// Wait probes every component concurrently until all are healthy, or the
// timeout passes with a diagnostic that names the cause (exit code 4).
var Wait = workflow.Phase[*Node]{
	Name:     "wait",
	Short:    "Wait until every component is healthy",
	LiveOnly: true,
	Run:      runWait,
}

func runWait(ctx context.Context, s *Node) error {
	pods, missing, err := ManifestPods(s)
	if err != nil {
		return err
	}
	probes, err := health.Probes(s.Config, pods, s.Files.HostPath)
	if err != nil {
		return err
	}
	opts := health.WaitOptions{
		Timeout:      s.Config.Timeouts.ControlPlane.Duration,
		ManifestsDir: s.Config.Paths.ManifestsDir,
	}
	if opts.ForeignFiles, err = foreignManifests(s); err != nil {
		return err
	}
	if s.Report.JSON() {
		opts.OnChange = func(c health.Change) {
			s.Report.Event(output.Event{Level: output.LevelInfo, Msg: c.String(), Fields: map[string]any{"health": c}})
		}
	} else {
		progress := s.Report.Progress()
		defer progress.Stop()
		opts.OnChange = progress.Update
	}
	s.Healthy, err = health.Wait(ctx, probes, opts)
	if err == nil {
		reportEtcdCluster(ctx, s)
	}
	var notHealthy *health.NotHealthyError
	if errors.As(err, &notHealthy) {
		notHealthy.Logs = containerLogs(ctx, s, notHealthy.Unhealthy)
	}
	if err != nil && len(missing) > 0 {
		return fmt.Errorf("%w\nalso: %s missing from %s, so the kubelet does not run it: restore it with `kubeboot init phase write-manifests`",
			err, strings.Join(missing, ", "), s.Config.Paths.ManifestsDir)
	}
	return err
}

// ManifestPods decodes the manifests the kubelet runs, so the probes use
// the addresses, ports and files that are really in effect. A manifest
// missing from the manifest directory is probed as rendered, and named.
func ManifestPods(s *Node) (pods map[string]*corev1.Pod, missing []string, err error) {
	pods = map[string]*corev1.Pod{}
	for _, name := range Components(s.Config) {
		path := s.Config.ManifestPath(name)
		data, err := s.Files.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, filepath.Base(path))
			path = stagedPath(s.Config, name)
			data, err = s.Files.ReadFile(path)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("%s not found: run `kubeboot init phase write-manifests` first", s.Config.ManifestPath(name))
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read manifest %q: %w", path, err)
		}
		if pods[name], err = DecodePod(path, data); err != nil {
			return nil, nil, err
		}
	}
	return pods, missing, nil
}

// DecodePod decodes the manifest read from path, refusing one with more
// nodes than a manifest may hold before the decoder spends memory on it.
func DecodePod(path string, data []byte) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	if err := decodeManifest(path, data, pod); err != nil {
		return nil, err
	}
	return pod, nil
}

// decodeManifest decodes the manifest read from path into into, as
// DecodePod says.
func decodeManifest(path string, data []byte, into any) error {
	if err := inputfile.CheckYAML(path, data, inputfile.ManifestNodes); err != nil {
		return fmt.Errorf("decode manifest: %w (check it with `kubeboot validate %s`)", err, path)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		return fmt.Errorf("decode manifest %q (check it with `kubeboot validate %s`): %w", path, path, err)
	}
	return nil
}

// foreignManifests lists the files the kubelet runs besides ours, such as a
// kube-apiserver.yaml.bak: the kubelet runs every non-dot regular file, so
// they are a common hidden cause of a control plane that does not come up.
func foreignManifests(s *Node) ([]string, error) {
	dir := s.Config.Paths.ManifestsDir
	entries, err := os.ReadDir(s.Files.HostPath(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read manifest directory %q: %w", dir, err)
	}
	// A disabled pod's manifest is ours too: write-manifests removes it.
	ours := ManifestPaths(s.Config)
	for _, name := range config.KubebootPods {
		ours = append(ours, s.Config.ManifestPath(name))
	}
	var foreign []string
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, ".") && !e.IsDir() && !slices.Contains(ours, filepath.Join(dir, name)) {
			foreign = append(foreign, name)
		}
	}
	return foreign, nil
}

// reportEtcdCluster tells, after the wait phase, what the local member's
// cluster looks like: its members, the leader, the learners and each
// member's endpoint and health. It only informs, so a failure is a warning.
func reportEtcdCluster(ctx context.Context, s *Node) {
	if s.Config.Etcd.Local == nil {
		return
	}
	cli, err := etcd.New(ctx, []string{etcd.ClientURL(s.Config)}, etcd.LocalTLS(s.Config, s.Files.HostPath))
	if err != nil {
		s.Report.Warnf("etcd cluster health unknown: %v", err)
		return
	}
	defer func() { _ = cli.Close() }()
	lines, err := etcd.Describe(ctx, cli)
	if err != nil {
		s.Report.Warnf("etcd cluster health unknown: %v", err)
		return
	}
	for _, l := range lines {
		s.Report.Infof("%s", l)
	}
}

// logTailLines is how much of a failing component's log a diagnosis shows.
const logTailLines = 15

// containerLogs asks the node's container runtime for the state and log
// tail of each unhealthy component's newest container: a component that
// exits at once is only "connection refused" to a probe, and its log says
// why. What the runtime cannot tell is left out.
func containerLogs(ctx context.Context, s *Node, unhealthy []health.Unhealthy) map[string]health.ContainerLog {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	runtime, err := cri.Dial(s.Config.Kubelet.ContainerRuntimeEndpoint, s.Files.HostPath)
	if err != nil {
		return nil
	}
	defer func() { _ = runtime.Close() }()
	logs := map[string]health.ContainerLog{}
	for _, u := range unhealthy {
		if u.External {
			continue
		}
		tail, state, err := runtime.LogTail(ctx, u.Component+"-"+s.Config.Node.Name, u.Component, logTailLines)
		if err == nil {
			logs[u.Component] = health.ContainerLog{State: state, Tail: tail}
		}
	}
	return logs
}
