//go:build e2e && conformance

package e2e

import (
	"context"
	"os"
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
// (default resizeFocus), on a lab of two machine nodes that came up
// unattended, from inside the control-plane node, and checks that no
// kubelet restarted meanwhile. It is not part of `make test`: `make
// conformance` builds e2e.test and the busybox image's package, and runs it.
func TestConformance(t *testing.T) {
	e2eTest := os.Getenv("KUBEBOOT_E2E_TEST")
	if e2eTest == "" {
		t.Fatal("KUBEBOOT_E2E_TEST names the e2e.test binary of Kubernetes v1.36.3: run `make conformance`")
	}
	focus := os.Getenv("KUBEBOOT_CONFORMANCE_FOCUS")
	if focus == "" {
		focus = resizeFocus
	}
	ctx := context.Background()
	l := newMachineLab(t, "mc", "10.89.241.0/24", "cp1:control-plane", "w1:worker")
	cfg := clusterFile(l)
	l.images(t, cfg, []lab.Image{busyboxImage(t)})
	cp := l.machine(t, 0, cfg)
	cp.Binds = append(cp.Binds, e2eTest+":/opt/e2e.test")
	if err := cp.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	waitBootstrapped(t, cp)
	w1 := l.machine(t, 1, workerFile(l, caHash(t, cp)))
	if err := w1.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	waitBootstrapped(t, w1)
	// Each kubelet's process and systemd's count of its restarts.
	restarts := func() string {
		var out []string
		for _, m := range []machine.Machine{cp, w1} {
			out = append(out, m.Name+": "+strings.ReplaceAll(inMachine(t, m, "systemctl", "show", "kubelet", "-p", "MainPID", "-p", "NRestarts", "--value"), "\n", " "))
		}
		return strings.Join(out, "; ")
	}
	before := restarts()

	start := time.Now()
	var stdout, stderr strings.Builder
	err := cp.Run(ctx, nil, &stdout, &stderr, "/opt/e2e.test",
		"--kubeconfig=/etc/kubernetes/admin.conf", "--provider=skeleton",
		"--ginkgo.focus="+focus,
		"--ginkgo.no-color", "--ginkgo.timeout=3h")
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
