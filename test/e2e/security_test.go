//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// The security test brings up one lab on its own loopback address and
// checks kubeboot's hardening against the running control plane: the CIS
// benchmark through kube-bench, then each hardening by its effect. Its
// helpers are prefixed sec, so they live beside the rest of the suite.

// The lab's address, and the ports of the controller manager and the
// scheduler. CIS 1.3.7 and 1.4.2 want those two bound to 127.0.0.1, which
// is kubeboot's default on a real node; a lab on 127.0.0.x binds them to
// its own address so that labs can run side by side (templates/DIFFERENCES.md).
// This lab binds them to 127.0.0.1 as a real node does, on ports no other
// lab uses.
const (
	secAddr          = "127.0.0.60"
	secNodeName      = "sec"
	secCMPort        = "10357"
	secSchedulerPort = "10359"
	secLabTemplate   = "../../examples/lab.yaml"
	secCommandLimit  = 6 * time.Minute
)

// secLab is one running lab: every path of its config is under dir.
type secLab struct {
	root, dir, config string
	binDir, kubeboot  string
	started           bool
}

func (l *secLab) path(rel string) string { return filepath.Join(l.dir, rel) }

// secEnv checks that the test can run here and builds kubeboot.
func secEnv(t *testing.T) (binDir, kubeboot string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the security test runs the real kubelet and kube-bench, which need root: run it as root")
	}
	binDir = os.Getenv("KUBEBOOT_BIN_DIR")
	if binDir == "" {
		t.Fatal("KUBEBOOT_BIN_DIR is not set: run `make e2e`, or `make binaries` and set KUBEBOOT_BIN_DIR=test/tools/bin")
	}
	binDir, err := filepath.Abs(binDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"etcd", "etcdctl", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl", "kube-bench", "kube-bench-cfg/cis-1.11/master.yaml"} {
		if _, err := os.Stat(filepath.Join(binDir, name)); err != nil {
			t.Fatalf("%s is missing in KUBEBOOT_BIN_DIR=%s: build the binaries with `make binaries`", name, binDir)
		}
	}
	kubeboot = filepath.Join(t.TempDir(), "kubeboot")
	build := exec.Command("go", "build", "-o", kubeboot, "github.com/kubeboot/kubeboot/cmd/kubeboot")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // static: the CSR approver's image holds only this binary
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build kubeboot: %v\n%s", err, out)
	}
	return binDir, kubeboot
}

// secRun runs a binary to completion and returns its stdout; a non-zero
// exit is an error carrying stderr.
func secRun(bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), secCommandLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// secNewLab writes the lab's config: examples/lab.yaml moved to its own
// directory and address, with the controller manager and the scheduler
// bound as on a real node. Cleanup stops the lab and checks that nothing
// of it is left running.
func secNewLab(t *testing.T, binDir, kubeboot string) *secLab {
	t.Helper()
	// A short root keeps the CRI socket path under the 108-byte limit.
	root, err := os.MkdirTemp("", "kb-sec-")
	if err != nil {
		t.Fatal(err)
	}
	l := &secLab{root: root, dir: filepath.Join(root, "n"), binDir: binDir, kubeboot: kubeboot}
	t.Cleanup(func() { l.cleanup(t) })
	tmpl, err := os.ReadFile(secLabTemplate)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(tmpl), "/tmp/kubeboot-lab", l.dir)
	text = strings.ReplaceAll(text, "127.0.0.1", secAddr)
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["node"].(map[string]any)["name"] = secNodeName
	bind := func(port string) map[string]any {
		return map[string]any{"extraArgs": []map[string]any{
			{"name": "bind-address", "value": "127.0.0.1"}, {"name": "secure-port", "value": port},
		}}
	}
	cfg["controllerManager"], cfg["scheduler"] = bind(secCMPort), bind(secSchedulerPort)
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l.config = filepath.Join(root, "kubeboot.yaml")
	if err := os.WriteFile(l.config, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return l
}

// up runs `kubeboot lab up`.
func (l *secLab) up(t *testing.T) {
	t.Helper()
	l.started = true
	if _, err := secRun(l.kubeboot, "lab", "up", "--config", l.config, "--bin-dir", l.binDir, "-o", "json"); err != nil {
		t.Fatalf("lab up: %v", err)
	}
}

// kubectl runs kubectl as the lab's admin.
func (l *secLab) kubectl(args ...string) (string, error) {
	return secRun(filepath.Join(l.binDir, "kubectl"), append([]string{"--kubeconfig", l.path("admin.conf")}, args...)...)
}

// cleanup stops the lab, kills and reports any process left under its
// root, and removes the root unless the test failed or a mount remains.
func (l *secLab) cleanup(t *testing.T) {
	if l.started {
		if t.Failed() {
			for _, name := range []string{"kubelet", "containerd"} {
				if data, err := os.ReadFile(l.path("lab/" + name + ".log")); err == nil {
					t.Logf("--- tail of %s.log:\n%s", name, secTail(string(data), 40))
				}
			}
		}
		if _, err := secRun(l.kubeboot, "lab", "down", "--config", l.config, "--bin-dir", l.binDir); err != nil {
			t.Errorf("lab down: %v", err)
		}
	}
	for _, pid := range secProcessesUnder(l.root) {
		t.Errorf("after lab down, process %d of the lab remains (killed now)", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mounts), " "+l.root+"/") {
		t.Errorf("after lab down, mounts under %s remain", l.root)
		return
	}
	if t.Failed() {
		t.Logf("kept %s for inspection", l.root)
		return
	}
	if err := os.RemoveAll(l.root); err != nil {
		t.Errorf("remove %s: %v", l.root, err)
	}
}

// secProcessesUnder lists the processes whose command line names a path under dir.
func secProcessesUnder(dir string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(dir+"/")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func secTail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// secEnsureEtcdUser creates the dedicated etcd user that CIS 1.1.12 asks
// to own the etcd data dir, as the provisioning of a real node would, and
// removes it again afterwards if it was not there before.
func secEnsureEtcdUser(t *testing.T) {
	t.Helper()
	passwd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(passwd, []byte("\netcd:")) || bytes.HasPrefix(passwd, []byte("etcd:")) {
		return
	}
	if out, err := exec.Command("useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", "etcd").CombinedOutput(); err != nil {
		t.Fatalf("create the etcd user: %v\n%s", err, out)
	}
	t.Log("created the system user etcd for the test; it is removed afterwards")
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", "etcd").CombinedOutput(); err != nil {
			t.Errorf("remove the etcd user: %v\n%s", err, out)
		}
	})
}

// secPortsFree fails the test when another process holds the ports this
// lab needs on 127.0.0.1.
func secPortsFree(t *testing.T) {
	t.Helper()
	for _, port := range []string{secCMPort, secSchedulerPort} {
		l, err := net.Listen("tcp", "127.0.0.1:"+port)
		if err != nil {
			t.Fatalf("127.0.0.1:%s is taken (%v): the security lab binds the controller manager and the scheduler there", port, err)
		}
		_ = l.Close()
	}
}

func TestSecurityHardening(t *testing.T) {
	binDir, kubeboot := secEnv(t)
	secPortsFree(t)
	secEnsureEtcdUser(t)
	lab := secNewLab(t, binDir, kubeboot)
	start := time.Now()
	lab.up(t)
	t.Logf("lab up on %s took %s", secAddr, time.Since(start).Round(time.Second))

	t.Run("kube-bench", func(t *testing.T) { secKubeBench(t, lab) })
	t.Run("secrets encrypted in etcd", func(t *testing.T) { secCheckEncryption(t, lab) })
	t.Run("audit log", func(t *testing.T) { secCheckAudit(t, lab) })
	t.Run("TLS", func(t *testing.T) { secCheckTLS(t, lab) })
	t.Run("anonymous access", func(t *testing.T) { secCheckAnonymous(t, lab) })
	t.Run("API server to kubelet", func(t *testing.T) { secCheckKubeletPath(t, lab) })
	t.Run("files", func(t *testing.T) { secCheckFiles(t, lab) })
	t.Run("re-run writes nothing", func(t *testing.T) { secCheckRerun(t, lab) })
}

// secCheckRerun runs init again on the live node: everything converges,
// the encryption key included, so nothing is written.
func secCheckRerun(t *testing.T, l *secLab) {
	before, err := os.ReadFile(l.path("pki/encryption-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := secRun(l.kubeboot, "init", "--config", l.config, "-o", "json", "--ignore-preflight-errors="+hostNodeIgnored)
	if err != nil {
		t.Fatalf("re-run: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var last struct {
		Result struct {
			OK      bool     `json:"ok"`
			Written []string `json:"written"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatalf("no result line: %v\n%s", err, out)
	}
	if !last.Result.OK || len(last.Result.Written) != 0 {
		t.Errorf("re-run: ok=%v, wrote %v", last.Result.OK, last.Result.Written)
	}
	after, err := os.ReadFile(l.path("pki/encryption-config.yaml"))
	if err != nil || !bytes.Equal(before, after) {
		t.Errorf("the re-run changed the encryption configuration (%v)", err)
	}
}

// secPoll retries fn every half second until it succeeds or timeout passes.
func secPoll(timeout time.Duration, fn func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}
