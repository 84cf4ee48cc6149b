//go:build e2e && conformance

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/lab"
	"github.com/kubeboot/kubeboot/machine"
)

// busyboxImage is the conformance tests' busybox image, built from
// Debian's busybox-static (apt-get install busybox-static): their pods run
// /bin/sh scripts with sleep and cat, which busybox's shell runs as its
// own applets.
func busyboxImage(t *testing.T) lab.Image {
	t.Helper()
	const busybox = "/bin/busybox"
	if _, err := os.Stat(busybox); err != nil {
		t.Fatalf("the busybox image is built from %s: apt-get install busybox-static", busybox)
	}
	files := map[string]string{}
	for _, name := range []string{"busybox", "sh", "sleep", "cat", "ls"} {
		files["/bin/"+name] = busybox
	}
	return lab.Image{Ref: "registry.k8s.io/e2e-test-images/busybox:1.37.0-1", Files: files, Entrypoint: []string{"/bin/sh"}}
}

// resizeFocus selects Kubernetes' six in-place pod resize conformance
// tests, which crashed the lab's kubelet before its nodes were machines.
const resizeFocus = `\[sig-node\] Pod InPlace Resize Container.*\[Conformance\]`

// TestConformance runs Kubernetes' own conformance tests (e2e.test of
// v1.36.3 at $KUBEBOOT_E2E_TEST), those $KUBEBOOT_CONFORMANCE_FOCUS selects
// (default resizeFocus), on a lab of two machine nodes that `lab up
// --cluster` brought up, from this host in the control-plane node's
// network namespace, and checks that no kubelet restarted meanwhile. It
// is not part of `make test`: `make conformance` builds e2e.test and the
// busybox image's package, and runs it.
func TestConformance(t *testing.T) {
	e2eTest := os.Getenv("KUBEBOOT_E2E_TEST")
	if e2eTest == "" {
		t.Fatal("KUBEBOOT_E2E_TEST names the e2e.test binary of Kubernetes v1.36.3: run `make conformance`")
	}
	focus := os.Getenv("KUBEBOOT_CONFORMANCE_FOCUS")
	if focus == "" {
		focus = resizeFocus
	}
	c := startMachineCluster(t, "mc", "10.89.241.0/24", "10.245.0.0/16", "\n- {name: cp1, role: control-plane}\n- {name: w1, role: worker}\n")
	r := runCommand(t, kubebootBin, "lab", "up", "--cluster", c.desc, "--bin-dir", binDir)
	if r.code != 0 {
		t.Fatalf("lab up --cluster exited %d:\n%s", r.code, tailString(r.stderr, 40))
	}
	cp, w1 := c.machine(t, "cp1"), c.machine(t, "w1")
	// The tests' busybox image, loaded into each node's containerd as the
	// lab's own are.
	archive, err := lab.Archive(filepath.Join(binDir, ".lab-images"), []lab.Image{busyboxImage(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []machine.Machine{cp, w1} {
		if err := os.MkdirAll(filepath.Join(m.Root(), "root"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(archive, filepath.Join(m.Root(), "root/busybox.tar")); err != nil {
			t.Fatal(err)
		}
		inMachine(t, m, "ctr", "-n", "k8s.io", "images", "import", "/root/busybox.tar")
	}
	// Each kubelet's process and systemd's count of its restarts.
	restarts := func() string {
		var out []string
		for _, m := range []machine.Machine{cp, w1} {
			out = append(out, m.Name+": "+strings.ReplaceAll(inMachine(t, m, "systemctl", "show", "kubelet", "-p", "MainPID", "-p", "NRestarts", "--value"), "\n", " "))
		}
		return strings.Join(out, "; ")
	}
	before := restarts()

	// e2e.test runs from this host in cp1's network namespace, where the
	// nodes and their pods are reachable, with cp1's admin.conf.
	start := time.Now()
	var stdout, stderr strings.Builder
	cmd := exec.Command("nsenter", "--net=/run/netns/"+c.lab.Cluster.Netns("cp1"), "--", e2eTest,
		"--kubeconfig="+filepath.Join(cp.Root(), "etc/kubernetes/admin.conf"), "--provider=skeleton",
		"--ginkgo.focus="+focus, "--ginkgo.no-color", "--ginkgo.timeout=3h")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	t.Logf("TIMING: the conformance tests (focus %s): %s", focus, time.Since(start).Round(time.Second))
	out := stdout.String()
	if m := regexp.MustCompile(`Ran \d+ of \d+ Specs.*\n.*`).FindString(out); m != "" {
		t.Logf("e2e.test: %s", m)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "[FAIL]") || strings.Contains(line, "[PANICKED]") {
			t.Logf("%s", line)
		}
	}
	if err != nil {
		t.Errorf("e2e.test failed: %v\n%s\n%s", err, lastLines(out, 120), lastLines(stderr.String(), 20))
	}
	if after := restarts(); after != before {
		t.Errorf("a kubelet restarted during the tests: before %q, after %q", before, after)
	}
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
