package phases

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	udiff "github.com/aymanbagabas/go-udiff"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/inputfile"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/staticpod"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/templates"
)

// The manifest phases hand the rendered manifests to each other through a
// staging directory outside the kubelet's manifest directory, so nothing
// reaches the kubelet before the whole set is validated.

// Manifest file modes: only root reads them, as CIS asks.
const (
	// ManifestMode is the mode of a manifest.
	ManifestMode fs.FileMode = 0o600
	// ManifestDirMode is the mode of the manifest and staging directories.
	ManifestDirMode fs.FileMode = 0o700
)

// Etcd prepares the local etcd member's data directory and renders its manifest.
var Etcd = workflow.Phase[*Node]{Name: "etcd", Short: "Create the etcd data directory and render the etcd static pod manifest", Run: func(_ context.Context, s *Node) error {
	if s.Config.Etcd.External != nil {
		s.Report.Infof("external etcd: no local etcd manifest")
		return nil
	}
	if err := EnsureEtcdDataDir(s); err != nil {
		return err
	}
	return Render(s, config.NameEtcd)
}}

// ControlPlane renders the API server, controller-manager and scheduler
// manifests, and those of kubeboot's own pods that are enabled (the CSR
// approver, the etcd snapshot schedule).
var ControlPlane = workflow.Phase[*Node]{
	Name:  "control-plane",
	Short: "Render the API server, controller-manager, scheduler, CSR approver and etcd snapshot schedule manifests",
	Run: func(_ context.Context, s *Node) error {
		return Render(s, append([]string{config.NameAPIServer, config.NameControllerManager, config.NameScheduler}, config.KubebootPods...)...)
	},
}

// Validate checks every staged manifest against the kubelet's rules.
var Validate = workflow.Phase[*Node]{Name: "validate", Short: "Check that the kubelet will accept every manifest", Run: func(_ context.Context, s *Node) error {
	set, err := stagedSet(s)
	if err == nil {
		s.Report.Infof("the kubelet will accept all %d manifests", len(set))
	}
	return err
}}

// WriteManifests writes the validated set into the manifest directory.
var WriteManifests = workflow.Phase[*Node]{
	Name:  "write-manifests",
	Short: "Write the manifests atomically into the kubelet's manifest directory",
	Run:   runWriteManifests,
}

// stagingDir holds the rendered manifests between phases.
func stagingDir(c *config.ClusterConfiguration) string {
	return filepath.Join(c.Paths.KubeconfigDir, "kubeboot", "staged")
}

func stagedPath(c *config.ClusterConfiguration, component string) string {
	return filepath.Join(stagingDir(c), component+".yaml")
}

// ManifestPaths lists the node paths of the manifests this node runs.
func ManifestPaths(c *config.ClusterConfiguration) []string {
	var paths []string
	for _, name := range StaticPods(c) {
		paths = append(paths, c.ManifestPath(name))
	}
	return paths
}

// Components lists the control-plane components this node runs, in start
// order: those the wait phase waits for, and upgrades and restarts verify.
func Components(c *config.ClusterConfiguration) []string {
	if c.Etcd.External != nil {
		return config.ComponentNames[1:]
	}
	return config.ComponentNames
}

// StaticPods lists every manifest kubeboot writes on this node, in start
// order: the components, then kubeboot's own pods that are enabled.
func StaticPods(c *config.ClusterConfiguration) []string {
	pods := slices.Clone(Components(c))
	for _, name := range config.KubebootPods {
		if c.KubebootPodEnabled(name) {
			pods = append(pods, name)
		}
	}
	return pods
}

// RenderPods builds this node's pods and applies the patches, in memory.
func RenderPods(s *Node) ([]templates.Manifest, error) {
	patches, err := readPatches(s)
	if err != nil {
		return nil, err
	}
	manifests, err := templates.All(s.Config, s.Membership, s.System.Kubeboot)
	if err != nil {
		return nil, err
	}
	for i, m := range manifests {
		if manifests[i].Pod, err = templates.ApplyPatches(m.Component, m.Pod, patches); err != nil {
			return nil, err
		}
	}
	return manifests, nil
}

// Render builds, patches and stages the named components' manifests. A
// manifest the kubelet would reject is never staged, so a later phase run
// alone cannot pick it up.
func Render(s *Node, names ...string) error {
	manifests, err := RenderPods(s)
	if err != nil {
		return err
	}
	manifests = slices.DeleteFunc(manifests, func(m templates.Manifest) bool { return !slices.Contains(names, m.Component) })
	// Each manifest is marshalled and decoded again by the validation, a
	// millisecond of YAML each: on as many cores as there are.
	staged := make([]stagedManifest, len(manifests))
	results := make([]staticpod.Result, len(manifests))
	errs := make([]error, len(manifests))
	var wg sync.WaitGroup
	for i, m := range manifests {
		wg.Go(func() {
			data, err := templates.Marshal(m.Pod)
			if err != nil {
				errs[i] = err
				return
			}
			results[i] = s.ValidateManifest(m.Component+".yaml", data)
			staged[i] = stagedManifest{component: m.Component, data: data}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := staticpod.Err(results); err != nil {
		return err
	}
	for _, m := range staged {
		if s.Options.Diff {
			if err := printDiff(s, m.component, m.data); err != nil {
				return err
			}
		}
		if err := s.Files.MkdirAll(stagingDir(s.Config), ManifestDirMode); err != nil {
			return err
		}
		if err := s.Files.WriteFile(stagedPath(s.Config, m.component), m.data, ManifestMode); err != nil {
			return err
		}
		s.Report.Infof("rendered %s", m.component)
	}
	return nil
}

// printDiff shows how a rendered manifest differs from the one the kubelet runs.
func printDiff(s *Node, component string, rendered []byte) error {
	path := s.Config.ManifestPath(component)
	current, err := s.Files.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read manifest %q: %w", path, err)
	}
	diff := udiff.Unified(path, path+" (rendered)", string(current), string(rendered))
	switch {
	case diff == "":
		s.Report.Infof("%s: no change", component)
		return nil
	case s.Report.JSON():
		// stdout carries one JSON object per line: the diff travels inside one.
		s.Report.Event(output.Event{Level: output.LevelInfo, Msg: component + ": differs", Fields: map[string]any{"path": path, "diff": diff}})
		return nil
	}
	if _, err := io.WriteString(s.Stdout, diff); err != nil {
		return fmt.Errorf("print diff of %q: %w", path, err)
	}
	return nil
}

// readPatches reads every non-dot file of the patches directory; the
// templates package rejects names it does not understand.
func readPatches(s *Node) ([]templates.Patch, error) {
	dir := s.Config.PatchesDir
	if dir == "" {
		return nil, nil
	}
	host := s.Files.HostPath(dir)
	// Opening a FIFO in place of the directory would block: look first.
	info, err := os.Stat(host)
	if err != nil {
		return nil, fmt.Errorf("read patches directory %q: %w", dir, err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("read patches directory %q: not a directory", dir)
	}
	entries, err := os.ReadDir(host)
	if err != nil {
		return nil, fmt.Errorf("read patches directory %q: %w", dir, err)
	}
	var patches []templates.Patch
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, err := readPatch(s.Files.HostPath(dir), s.Files.HostPath(path))
		if err != nil {
			return nil, fmt.Errorf("read patch %q: %w; replace it or move it out of %s", path, err, dir)
		}
		patches = append(patches, templates.Patch{File: path, Data: data})
	}
	return patches, nil
}

// readPatch reads a patch file at host, in the patches dir hostDir: a
// regular file of at most inputfile.PatchLimit, owned by root or by the
// user running kubeboot, because what it says runs as root in the control
// plane. A symlink must stay inside the patches dir: one to /etc/shadow
// would otherwise pass as root's file, and its content reach error messages.
func readPatch(hostDir, host string) ([]byte, error) {
	if link, err := os.Lstat(host); err == nil && link.Mode().Type() == fs.ModeSymlink {
		target, err := filepath.EvalSymlinks(host)
		if err != nil {
			return nil, err
		}
		dir, err := filepath.EvalSymlinks(hostDir)
		if err != nil {
			return nil, err
		}
		if !strings.HasPrefix(target, dir+string(filepath.Separator)) {
			return nil, fmt.Errorf("a symlink to %s, outside the patches dir: copy the patch into it", target)
		}
	}
	info, err := os.Stat(host)
	if err != nil {
		return nil, err
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("owned by uid %d, neither root nor you (uid %d), yet it changes what runs as root: chown it", st.Uid, os.Geteuid())
	}
	return inputfile.ReadYAML(host, inputfile.PatchLimit, inputfile.ManifestNodes)
}

// stagedManifest is a rendered manifest ready to be written.
type stagedManifest struct {
	component string
	data      []byte
}

// stagedSet reads every staged manifest and validates the whole set; it
// fails, naming every finding, when the kubelet would reject any of them.
// write-manifests validates again, because it may run alone.
func stagedSet(s *Node) ([]stagedManifest, error) {
	var set []stagedManifest
	var results []staticpod.Result
	for _, name := range StaticPods(s.Config) {
		path := stagedPath(s.Config, name)
		data, err := s.Files.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			phase := "control-plane"
			if name == config.NameEtcd {
				phase = "etcd"
			}
			return nil, fmt.Errorf("%s is not rendered yet (%s not found): run `kubeboot init phase %s` first", name, path, phase)
		}
		if err != nil {
			return nil, fmt.Errorf("read staged manifest %q: %w", path, err)
		}
		res := s.ValidateManifest(name+".yaml", data)
		for _, w := range res.Warnings {
			s.Report.Warnf("%s: %s", res.File, w)
		}
		results = append(results, res)
		set = append(set, stagedManifest{component: name, data: data})
	}
	if err := staticpod.Err(results); err != nil {
		return nil, err
	}
	return set, nil
}

// runWriteManifests validates the staged set, then writes each changed
// manifest atomically. Nothing is written when any manifest is rejected,
// and an unchanged manifest is not rewritten, so its pod keeps running.
func runWriteManifests(_ context.Context, s *Node) error {
	set, err := stagedSet(s)
	if err != nil {
		return err
	}
	dir := s.Config.Paths.ManifestsDir
	if err := s.Files.MkdirAll(dir, ManifestDirMode); err != nil {
		return err
	}
	removed, err := files.RemoveTempFiles(s.Files, dir)
	if err != nil {
		return err
	}
	for _, r := range removed {
		s.Report.Infof("removed %s, left by an interrupted write", r)
	}
	for _, m := range set {
		if err := s.Files.WriteFile(s.Config.ManifestPath(m.component), m.data, ManifestMode); err != nil {
			return err
		}
	}
	return RemoveDisabledManifests(s)
}

// RemoveDisabledManifests removes the manifest of each of kubeboot's own
// pods that the configuration turns off (csrApprover.enabled false, no
// etcd.local.scheduledSnapshots), so that the kubelet stops it: the file
// is kubeboot's by its name.
func RemoveDisabledManifests(s *Node) error {
	for _, name := range config.KubebootPods {
		if s.Config.KubebootPodEnabled(name) {
			continue
		}
		path := s.Config.ManifestPath(name)
		if _, err := s.Files.ReadFile(path); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		s.Report.Infof("the configuration turns %s off: removing %s", name, path)
		if err := s.Files.Remove(path); err != nil {
			return err
		}
	}
	return nil
}
