package phases

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/staticpod"
	"github.com/kubeboot/kubeboot/internal/workflow"
)

// manifestState is a node rooted in a temp dir that has run no phase yet.
func manifestState(t *testing.T, root, version string) *Node {
	t.Helper()
	c := config.New()
	c.KubernetesVersion = version
	config.SetDefaults(c, config.Host{Name: "node1", Address: "10.0.0.10"})
	if errs := config.Validate(c); len(errs) > 0 {
		t.Fatal(errs.ToAggregate())
	}
	return &Node{Run: &workflow.Run{System: workflow.HostSystem("v0.0.0-test"), Files: &files.AtomicWriter{Root: root}, Report: output.NewReporter(&bytes.Buffer{}, false)}, Config: c}
}

// renderAndWrite runs the manifest phases in order.
func renderAndWrite(s *Node) error {
	_, err := workflow.Runner[*Node]{Phases: []workflow.Phase[*Node]{Etcd, ControlPlane, Validate, WriteManifests}}.Run(context.Background(), s, nil)
	return err
}

// readManifests returns the manifest directory's files by name.
func readManifests(t *testing.T, s *Node) map[string]string {
	t.Helper()
	dir := s.Files.HostPath(s.Config.Paths.ManifestsDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = string(data)
	}
	return files
}

func TestWriteManifestsConverges(t *testing.T) {
	root := t.TempDir()
	s := manifestState(t, root, "v1.36.3")
	must(t, renderAndWrite(s))
	first := readManifests(t, s)
	if len(first) != 5 {
		t.Fatalf("wrote %d manifests, want the four components' and the CSR approver's: %v", len(first), first)
	}
	for name, data := range first {
		if res := staticpod.Validate(name, []byte(data), "node1"); !res.Accepted {
			t.Errorf("%s is not accepted: %v", name, res.Errors)
		}
	}
	again := manifestState(t, root, "v1.36.3")
	must(t, renderAndWrite(again))
	if w := again.Files.Changes().Written; len(w) != 0 {
		t.Errorf("a re-run wrote %v", w)
	}
	// Changing the version rewrites only the three Kubernetes components
	// (the approver's image is kubeboot's, not Kubernetes').
	upgrade := manifestState(t, root, "v1.35.0")
	must(t, renderAndWrite(upgrade))
	var written []string
	for _, w := range upgrade.Files.Changes().Written {
		if filepath.Dir(w) == upgrade.Config.Paths.ManifestsDir {
			written = append(written, filepath.Base(w))
		}
	}
	if got := strings.Join(written, ","); got != "kube-apiserver.yaml,kube-controller-manager.yaml,kube-scheduler.yaml" {
		t.Errorf("rewrote %s; etcd.yaml must stay untouched", got)
	}
}

func TestRejectedPatchWritesNothing(t *testing.T) {
	root := t.TempDir()
	s := manifestState(t, root, "v1.36.3")
	must(t, renderAndWrite(s))
	before := readManifests(t, s)

	patches := filepath.Join(root, "patches")
	must(t, os.MkdirAll(patches, 0o755))
	must(t, os.WriteFile(filepath.Join(patches, "kube-apiserver+strategic.yaml"), []byte(
		"spec:\n  volumes:\n  - name: token\n    secret:\n      secretName: apiserver-token\n"), 0o600))
	patched := manifestState(t, root, "v1.35.0") // a version change would rewrite three manifests
	patched.Config.PatchesDir = "/patches"
	err := renderAndWrite(patched)
	var rejected *staticpod.RejectedError
	if !errors.As(err, &rejected) || rejected.ExitCode() != 3 {
		t.Fatalf("want a rejection with exit code 3, got %v", err)
	}
	if !strings.Contains(err.Error(), "kube-apiserver.yaml: spec.volumes[") || !strings.Contains(err.Error(), "static pods may not reference secrets") {
		t.Errorf("error does not name the file, field and resource: %v", err)
	}
	after := readManifests(t, s)
	for name := range before {
		if before[name] != after[name] {
			t.Errorf("%s changed although the set was rejected", name)
		}
	}
	staged, err := s.Files.ReadFile(stagedPath(s.Config, "kube-apiserver"))
	must(t, err)
	if string(staged) != before["kube-apiserver.yaml"] {
		t.Error("the rejected manifest was staged, where write-manifests run alone would find it")
	}
}

func TestWriteManifestsNeedsRenderedSet(t *testing.T) {
	s := manifestState(t, t.TempDir(), "v1.36.3")
	err := WriteManifests.Run(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "run `kubeboot init phase etcd` first") {
		t.Errorf("want a hint to run the etcd phase, got %v", err)
	}
}

func TestDryRunPrintsWhatTheRealRunWrites(t *testing.T) {
	root := t.TempDir()
	var stdout, events bytes.Buffer
	dry := manifestState(t, root, "v1.36.3")
	dry.Files = &files.DryRunWriter{Root: root, Report: output.NewReporter(&events, false), Stdout: &stdout, Manifests: ManifestPaths(dry.Config)}
	must(t, renderAndWrite(dry))
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Fatalf("dry run wrote %v", entries)
	}
	real := manifestState(t, root, "v1.36.3")
	must(t, renderAndWrite(real))
	var want strings.Builder
	for _, name := range StaticPods(real.Config) {
		path := real.Config.ManifestPath(name)
		fmt.Fprintf(&want, "---\n# %s\n%s", path, readManifests(t, real)[name+".yaml"])
	}
	if stdout.String() != want.String() {
		t.Errorf("dry-run stdout differs from the written manifests:\n%s", stdout.String())
	}
}

// crashStepEnv, in a re-executed test binary, names the write step at which
// the process kills itself with SIGKILL.
const crashStepEnv = "KUBEBOOT_TEST_CRASH_AT_STEP"

// TestWriteManifestsCrashSafety kills a writer of the manifest set with
// SIGKILL at every step of every file's atomic write, and checks that the
// kubelet would only ever see complete old or complete new manifests.
func TestWriteManifestsCrashSafety(t *testing.T) {
	if os.Getenv(crashStepEnv) != "" {
		crashWriter(t)
		return
	}
	root := t.TempDir()
	old := manifestState(t, root, "v1.35.0")
	// An etcd flag makes the old etcd manifest differ too, so all four change.
	old.Config.Etcd.Local.ExtraArgs = []config.Arg{{Name: "snapshot-count", Value: "5000"}}
	must(t, renderAndWrite(old))
	oldFiles := readManifests(t, old)
	staged := manifestState(t, root, "v1.36.3")
	if _, err := (workflow.Runner[*Node]{Phases: []workflow.Phase[*Node]{Etcd, ControlPlane}}).Run(context.Background(), staged, nil); err != nil {
		t.Fatal(err)
	}

	newFiles := map[string]string{}
	for _, name := range config.ComponentNames {
		data, err := staged.Files.ReadFile(stagedPath(staged.Config, name))
		must(t, err)
		newFiles[name+".yaml"] = string(data)
	}
	kills := 0
	for step := 1; ; step++ {
		// Each run starts from the old set, so step numbers are distinct kill points.
		for name, data := range oldFiles {
			must(t, os.WriteFile(filepath.Join(old.Files.HostPath(old.Config.Paths.ManifestsDir), name), []byte(data), ManifestMode))
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestWriteManifestsCrashSafety$")
		cmd.Env = append(os.Environ(), crashStepEnv+"="+strconv.Itoa(step), "KUBEBOOT_TEST_ROOT="+root)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		killed := errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
		if err != nil && !killed {
			t.Fatalf("step %d: writer failed without being killed: %v\n%s", step, err, out)
		}
		checkCompleteManifests(t, old, oldFiles, newFiles, step)
		if !killed {
			break
		}
		kills++
	}
	t.Logf("killed the writer at %d points", kills)
	if kills != 4*6 {
		t.Errorf("%d kill points, want 6 steps for each of the 4 manifests", kills)
	}
	converge := manifestState(t, root, "v1.36.3")
	must(t, renderAndWrite(converge))
	for name, data := range readManifests(t, converge) {
		if strings.HasPrefix(name, ".") {
			t.Errorf("leftover temp file %s after converging", name)
		}
		if _, changed := newFiles[name]; changed && data == oldFiles[name] {
			t.Errorf("%s did not converge to the new version", name)
		}
	}
}

// crashWriter is the re-executed child: it writes the staged set and kills
// itself at the requested step.
func crashWriter(t *testing.T) {
	at, _ := strconv.Atoi(os.Getenv(crashStepEnv))
	s := manifestState(t, os.Getenv("KUBEBOOT_TEST_ROOT"), "v1.36.3")
	steps := 0
	s.Files.(*files.AtomicWriter).BeforeStep = func(string) error {
		if steps++; steps == at {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		return nil
	}
	must(t, WriteManifests.Run(context.Background(), s))
}

// checkCompleteManifests asserts that every non-dot file in the manifest
// directory is a complete old or complete new manifest.
func checkCompleteManifests(t *testing.T, s *Node, oldFiles, newFiles map[string]string, step int) {
	t.Helper()
	for name, data := range readManifests(t, s) {
		if strings.HasPrefix(name, ".") {
			continue // the kubelet ignores dot files
		}
		if data != oldFiles[name] && data != newFiles[name] {
			t.Errorf("step %d: %s is neither the complete old nor the complete new manifest", step, name)
		}
	}
}
