package lab_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kubeboot/kubeboot/cri"
	"github.com/kubeboot/kubeboot/lab"
)

// binDir is where test/tools/build.sh put containerd, ctr and pause:
// $KUBEBOOT_BIN_DIR, else test/tools/bin. Under CI a missing binary or
// runc fails the test: CI builds and installs them first.
func binDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("KUBEBOOT_BIN_DIR")
	if dir == "" {
		dir = filepath.Join("..", "test", "tools", "bin")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, name := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "pause"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			missing = append(missing, filepath.Join(dir, name))
		}
	}
	if _, err := exec.LookPath("runc"); err != nil {
		missing = append(missing, "runc (apt-get install runc)")
	}
	switch {
	case len(missing) == 0 && os.Geteuid() == 0:
		return dir
	case os.Getenv("CI") != "":
		t.Fatalf("the lab's runtime needs root and %v; build them with `make lab-binaries`", missing)
	}
	t.Skipf("the lab's runtime needs root and %v; build them with `make lab-binaries`", missing)
	return ""
}

// TestNodeOnContainerd starts a node's containerd, imports the sandbox
// image, runs a pod through the CRI as the kubelet would (which needs runc
// and the restricted oom_score_adj on these machines), and tears it all
// down: no process, mount or file of the node remains.
func TestNodeOnContainerd(t *testing.T) {
	bin := binDir(t)
	root, err := os.MkdirTemp("", "kb-lab-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	node := lab.Node{Dir: filepath.Join(root, "lab"), Socket: filepath.Join(root, "cri.sock"), BinDir: bin}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Cleanup(func() { _ = node.Down(context.Background(), t.Logf) })

	if err := node.StartContainerd(ctx); err != nil {
		t.Fatal(err)
	}
	pause, err := lab.ResolveImage(bin, lab.SandboxImage)
	if err != nil {
		t.Fatal(err)
	}
	archive, err := lab.Archive(t.TempDir(), []lab.Image{pause})
	if err != nil {
		t.Fatal(err)
	}
	if err := lab.Import(ctx, filepath.Join(bin, "ctr"), node.Socket, archive, []lab.Image{pause}); err != nil {
		t.Fatal(err)
	}
	client, err := cri.Dial("unix://"+node.Socket, func(p string) string { return p })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Close() }()
	missing, err := client.Missing(ctx, []string{lab.SandboxImage, "registry.k8s.io/etcd:0.0.0"})
	if err != nil || !slices.Equal(missing, []string{"registry.k8s.io/etcd:0.0.0"}) {
		t.Fatalf("images missing from the node: %v, %v; want only the one never imported", missing, err)
	}

	runPod(ctx, t, node.Socket, root)
	if procs := processesNaming(root); len(procs) == 0 {
		t.Fatal("no process of the node runs: the test would prove nothing")
	}

	if err := node.Down(ctx, t.Logf); err != nil {
		t.Fatalf("down: %v", err)
	}
	if procs := processesNaming(root); len(procs) > 0 {
		t.Errorf("after down, processes of the node remain: %v", procs)
	}
	if data, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(data), root) {
		t.Errorf("after down, mounts under %s remain", root)
	}
	for _, path := range []string{node.Dir, node.Socket, "/run/nri/nri.sock"} {
		if _, err := os.Lstat(path); err == nil {
			t.Errorf("after down, %s remains", path)
		}
	}
}

// runPod runs a pod sandbox on the host network, as the kubelet runs a
// static pod's.
func runPod(ctx context.Context, t *testing.T, socket, logDir string) {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_, err = runtimeapi.NewRuntimeServiceClient(conn).RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "test", Namespace: "default", Uid: "test-uid"},
		LogDirectory: logDir,
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
		}},
	}})
	if err != nil {
		t.Fatalf("run a pod: %v", err)
	}
}

// processesNaming lists the command lines of the processes that name dir:
// the node's containerd and its shims.
func processesNaming(dir string) []string {
	entries, _ := os.ReadDir("/proc")
	var found []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), dir) && e.Name() != strconv.Itoa(os.Getpid()) {
			found = append(found, strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return found
}
