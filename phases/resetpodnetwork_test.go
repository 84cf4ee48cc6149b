package phases_test

import (
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
	"github.com/kubeboot/kubeboot/templates"
)

// endpoint is the node's container runtime, under each test's root.
const endpoint = "unix:///run/containerd/containerd.sock"

// writeUnder writes content to the node path under root.
func writeUnder(t *testing.T, root, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(path)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, path), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRemovePods: reset removes every pod the runtime holds, each stopped
// first; a runtime without a socket holds none; a dry run removes none.
func TestRemovePods(t *testing.T) {
	root := t.TempDir()
	run := phasestest.NewRun(root, output.NewReporter(io.Discard, false))
	if left, err := phases.RemovePods(context.Background(), run, endpoint); err != nil || len(left) > 0 {
		t.Errorf("without a runtime: left %v, %v", left, err)
	}
	held := phasestest.ServePods(t, filepath.Join(root, "run/containerd/containerd.sock"), "default/web", "kube-system/coredns-1")
	run.Options.DryRun = true
	if left, err := phases.RemovePods(context.Background(), run, endpoint); err != nil || len(left) != 1 || len(held()) != 2 {
		t.Errorf("a dry run: left %v, pods %v, %v; want them kept, and said", left, held(), err)
	}
	run.Options.DryRun = false
	if left, err := phases.RemovePods(context.Background(), run, endpoint); err != nil || len(left) > 0 || len(held()) > 0 {
		t.Errorf("left %v, pods still held %v, %v", left, held(), err)
	}
}

// TestResetPodNetwork: with kubeboot's flannel configuration on the node,
// reset deletes the pod network's interfaces and removes the address
// records, flanneld's subnet file and the configuration, and nothing
// else; a dry run changes nothing; another pod network's configuration
// leaves everything, and says how to clean up.
func TestResetPodNetwork(t *testing.T) {
	theirs := []string{"/etc/cni/net.d/99-theirs.conflist", "/var/lib/cni/networks/theirs/10.0.0.2", "/run/flannel/theirs"}
	ours := []string{templates.FlannelIPAMDir + "/10.244.1.5", templates.FlannelIPAMDir + "/last_reserved_ip.0", templates.FlannelSubnetFile}
	setup := func(t *testing.T, conf string) (*workflow.Run, string, map[string]bool) {
		root := t.TempDir()
		links := map[string]bool{"cni0": true, "flannel.1": true, "eth0": true}
		run := &workflow.Run{Files: &files.AtomicWriter{Root: root}, Report: output.NewReporter(io.Discard, false),
			System: workflow.System{DeleteLink: func(name string) (bool, error) {
				had := links[name]
				delete(links, name)
				return had, nil
			}}}
		for _, p := range append(slices.Clone(theirs), ours...) {
			writeUnder(t, root, p, "data")
		}
		writeUnder(t, root, templates.FlannelCNIConfPath, conf)
		return run, root, links
	}
	exists := func(root, path string) bool {
		_, err := os.Lstat(filepath.Join(root, path))
		return err == nil
	}

	t.Run("kubeboot's", func(t *testing.T) {
		run, root, links := setup(t, templates.FlannelCNIConfig)
		removed, left, err := phases.ResetPodNetwork(context.Background(), run, endpoint)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{templates.FlannelIPAMDir, templates.FlannelSubnetFile, templates.FlannelCNIConfPath}; !slices.Equal(removed, want) || len(left) > 0 {
			t.Errorf("removed %v, left %v; want removed %v", removed, left, want)
		}
		if !maps.Equal(links, map[string]bool{"eth0": true}) {
			t.Errorf("interfaces left: %v, want eth0 alone", links)
		}
		for _, p := range append(ours, templates.FlannelCNIConfPath) {
			if exists(root, p) {
				t.Errorf("%s is still there", p)
			}
		}
		for _, p := range theirs {
			if !exists(root, p) {
				t.Errorf("reset removed %s, not kubeboot's", p)
			}
		}
		// Again: nothing of kubeboot's pod network is left to remove.
		if removed, left, err := phases.ResetPodNetwork(context.Background(), run, endpoint); err != nil || len(removed) > 0 || len(left) != 1 || !strings.Contains(left[0], "no pod network of kubeboot's") {
			t.Errorf("a re-run: removed %v, left %v, %v", removed, left, err)
		}
	})

	t.Run("a dry run", func(t *testing.T) {
		run, root, links := setup(t, templates.FlannelCNIConfig)
		var out strings.Builder
		run.Report = output.NewReporter(&out, false)
		run.Files = &files.DryRunWriter{Root: root, Report: run.Report, Stdout: io.Discard}
		run.Options.DryRun = true
		removed, _, err := phases.ResetPodNetwork(context.Background(), run, endpoint)
		if err != nil {
			t.Fatal(err)
		}
		if len(removed) != 3 || len(links) != 3 || !exists(root, templates.FlannelCNIConfPath) || !exists(root, templates.FlannelSubnetFile) {
			t.Errorf("a dry run changed the node: removed %v, interfaces %v", removed, links)
		}
		if !strings.Contains(out.String(), "would delete the network interface cni0") {
			t.Errorf("a dry run does not say what it would delete:\n%s", out.String())
		}
	})

	t.Run("pods still run", func(t *testing.T) {
		run, root, links := setup(t, templates.FlannelCNIConfig)
		held := phasestest.ServePods(t, filepath.Join(root, "run/containerd/containerd.sock"), "default/web", "kube-system/kube-flannel-ds-x")
		removed, left, err := phases.ResetPodNetwork(context.Background(), run, endpoint)
		if err != nil || len(removed) > 0 || len(links) != 3 || !exists(root, templates.FlannelCNIConfPath) || len(held()) != 2 {
			t.Errorf("removed %v, interfaces %v, pods %v, %v; want nothing touched while pods run", removed, links, held(), err)
		}
		if len(left) != 1 || !strings.Contains(left[0], "2 pods still run on it (default/web, kube-system/kube-flannel-ds-x)") || !strings.Contains(left[0], "crictl rmp --all --force") {
			t.Errorf("left %v, want the pods named and how to remove them", left)
		}
	})

	t.Run("another machine's files", func(t *testing.T) {
		run, root, links := setup(t, templates.FlannelCNIConfig)
		run.Options.Offline = true
		removed, left, err := phases.ResetPodNetwork(context.Background(), run, endpoint)
		if err != nil || len(removed) != 3 || exists(root, templates.FlannelCNIConfPath) {
			t.Errorf("removed %v, %v; want the files removed", removed, err)
		}
		if len(links) != 3 || len(left) != len(templates.FlannelLinks()) || !strings.Contains(left[0], "ip link delete cni0") {
			t.Errorf("interfaces %v, left %v; want this machine's kept, and said", links, left)
		}
	})

	t.Run("another's", func(t *testing.T) {
		run, root, links := setup(t, strings.Replace(templates.FlannelCNIConfig, "portmap", "bandwidth", 1))
		removed, left, err := phases.ResetPodNetwork(context.Background(), run, endpoint)
		if err != nil || len(removed) > 0 || len(links) != 3 {
			t.Errorf("removed %v, interfaces %v, %v; want nothing touched", removed, links, err)
		}
		for _, p := range append(ours, templates.FlannelCNIConfPath) {
			if !exists(root, p) {
				t.Errorf("reset removed %s of another pod network", p)
			}
		}
		if len(left) != 1 || !strings.Contains(left[0], "not the one kubeboot's flannel writes") || !strings.Contains(left[0], "ip link delete cni0") {
			t.Errorf("left %v, want it to say the pod network is not kubeboot's and how to clean up", left)
		}
	})

	t.Run("an interface that cannot be deleted", func(t *testing.T) {
		run, root, _ := setup(t, templates.FlannelCNIConfig)
		run.System.DeleteLink = func(string) (bool, error) { return false, errors.New("operation not permitted") }
		if _, _, err := phases.ResetPodNetwork(context.Background(), run, endpoint); err == nil || !exists(root, templates.FlannelCNIConfPath) {
			t.Errorf("got %v, want the error, with the configuration kept for a re-run", err)
		}
	})
}
