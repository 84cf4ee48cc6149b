//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The security test brings up one control-plane machine and checks
// kubeboot's hardening against the running control plane: the CIS
// benchmark through kube-bench, run in the machine as on a node, then
// each hardening by its effect. Its helpers are prefixed sec, so they
// live beside the rest of the suite.

// secCommandLimit bounds each of the test's own commands.
const secCommandLimit = 6 * time.Minute

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

// secKubectl runs kubectl as the node's admin, from its network.
func secKubectl(l *node, args ...string) (string, error) {
	return secRun("nsenter", append([]string{"--net=" + l.netns, "--", filepath.Join(binDir, "kubectl"), "--kubeconfig", l.path("admin.conf")}, args...)...)
}

// secEnsureEtcdUser creates, in the machine, the dedicated etcd user that
// CIS 1.1.12 asks to own the etcd data dir, as the provisioning of a real
// node would, and returns its uid.
func secEnsureEtcdUser(t *testing.T, l *node) int {
	t.Helper()
	inMachine(t, l.m, "useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", "etcd")
	uid, err := strconv.Atoi(inMachine(t, l.m, "id", "-u", "etcd"))
	if err != nil {
		t.Fatal(err)
	}
	return uid
}

func TestSecurityHardening(t *testing.T) {
	alongside(t)
	for _, name := range []string{"kube-bench", "kube-bench-cfg/cis-1.11/master.yaml"} {
		if _, err := os.Stat(filepath.Join(binDir, name)); err != nil {
			t.Fatalf("%s is missing in KUBEBOOT_BIN_DIR=%s: build the binaries with `make binaries`", name, binDir)
		}
	}
	l := newNode(t, "sec", "10.89.28.0/24")
	etcdUID := secEnsureEtcdUser(t, l)
	r := l.up(t)
	if r.code != 0 {
		t.Fatalf("init exited %d:\n%s", r.code, r.stderr)
	}
	t.Logf("init on %s took %s", l.addr, r.took.Round(time.Second))

	t.Run("kube-bench", func(t *testing.T) { secKubeBench(t, l) })
	t.Run("secrets encrypted in etcd", func(t *testing.T) { secCheckEncryption(t, l) })
	t.Run("audit log", func(t *testing.T) { secCheckAudit(t, l) })
	t.Run("TLS", func(t *testing.T) { secCheckTLS(t, l) })
	t.Run("anonymous access", func(t *testing.T) { secCheckAnonymous(t, l) })
	t.Run("API server to kubelet", func(t *testing.T) { secCheckKubeletPath(t, l) })
	t.Run("files", func(t *testing.T) { secCheckFiles(t, l, etcdUID) })
	t.Run("re-run writes nothing", func(t *testing.T) { secCheckRerun(t, l) })
}

// secCheckRerun runs init again on the live node: everything converges,
// the encryption key included, so nothing is written.
func secCheckRerun(t *testing.T, l *node) {
	before, err := os.ReadFile(l.path("pki/encryption-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	r := l.kubeboot(t, "init", "--config", l.config, "-o", "json")
	if r.code != 0 {
		t.Fatalf("re-run exited %d:\n%s", r.code, r.stderr)
	}
	out := r.stdout
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
