package app

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/exit"
)

// hostChecks are this host's own checks, which phases' hostchecks_test.go
// covers.
const hostChecks = "IsPrivilegedUser,FileContent--proc-sys-net-ipv4-ip_forward,Swap,CgroupV1,KernelVersion,FileExisting-kubelet,CRI"

// TestBootstrapRetriesUntilStopped: a worker whose cluster does not answer
// yet fails an attempt, waits and tries again, until systemd stops it;
// nothing but its progress is printed.
func TestBootstrapRetriesUntilStopped(t *testing.T) {
	dir := t.TempDir()
	cfg, node := workerConfig(t, dir)
	base, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	worker := writeFile(t, dir, "node.yaml", strings.Replace(string(base), "kind: WorkerConfiguration\n",
		"kind: WorkerConfiguration\nnode: {name: worker1}\ntimeouts: {discovery: 300ms}\n"+
			"discovery: {apiServerEndpoint: '127.0.0.93:1', token: "+joinToken+", caCertHashes: ['sha256:"+strings.Repeat("ab", 32)+"']}\n", 1))
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := runArgs(ctx, newDeps(""), []string{"bootstrap", "--config", worker, "--retry-interval", "100ms", "--ignore-preflight-errors", hostChecks}, &stdout, &stderr)
	if code == exit.OK {
		t.Fatalf("bootstrap succeeded against a cluster that does not answer:\n%s", stderr.String())
	}
	for _, want := range []string{"attempt 1 failed (exit code 1): ", "; retrying in 100ms", "attempt 2 failed", "127.0.0.93:1"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	if strings.Contains(stdout.String()+stderr.String(), "0123456789abcdef") {
		t.Error("the output holds the token's secret")
	}
	if entries, _ := os.ReadDir(node); len(entries) > 0 {
		t.Errorf("a failed discovery wrote %v", entries)
	}
}

// TestBootstrapStopsOnAConfigurationMistake: a mistake in the
// configuration fails at once, with exit code 2, and is not retried.
func TestBootstrapStopsOnAConfigurationMistake(t *testing.T) {
	dir := t.TempDir()
	for name, doc := range map[string]string{
		"a JoinConfiguration": "apiVersion: kubeboot.io/v1alpha1\nkind: JoinConfiguration\n",
		"an unknown field":    "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nclustername: x\n",
		"no discovery":        "apiVersion: kubeboot.io/v1alpha1\nkind: WorkerConfiguration\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := writeFile(t, dir, "node.yaml", doc)
			code, _, stderr := runCLI(t, "bootstrap", "--config", path, "--retry-interval", "1ms")
			if code != exit.Usage || strings.Contains(stderr, "attempt") || !strings.Contains(stderr, path) {
				t.Errorf("exit %d, want %d, once, naming %s:\n%s", code, exit.Usage, path, stderr)
			}
		})
	}
	if code, _, stderr := runCLI(t, "bootstrap"); code != exit.Usage || !strings.Contains(stderr, "bootstrap needs --config") {
		t.Errorf("without --config: exit %d:\n%s", code, stderr)
	}
	// With -o json, the mistake ends with a result, as any run's does.
	path := writeFile(t, dir, "node.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: WorkerConfiguration\n")
	code, stdout, _ := runCLI(t, "bootstrap", "--config", path, "-o", "json")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != exit.Usage || !strings.HasPrefix(lines[len(lines)-1], `{"result":`) || !strings.Contains(lines[len(lines)-1], `"exitCode":2`) {
		t.Errorf("-o json: exit %d, stdout:\n%s", code, stdout)
	}
	if code, _, stderr := runCLI(t, "bootstrap", "--config", path, "--retry-interval", "0s"); code != exit.Usage || !strings.Contains(stderr, "--retry-interval 0s: want a positive duration") {
		t.Errorf("--retry-interval 0s: exit %d:\n%s", code, stderr)
	}
}

// TestBootstrapUnit: the unit runs bootstrap on the configuration's path,
// once the network and containerd are up, only where that file exists.
func TestBootstrapUnit(t *testing.T) {
	code, stdout, stderr := runCLI(t, "bootstrap", "unit")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"ExecStart=/usr/bin/kubeboot bootstrap --config /etc/kubeboot/node.yaml -o json",
		"ConditionPathExists=/etc/kubeboot/node.yaml",
		"After=network-online.target containerd.service",
		"Type=oneshot", "RemainAfterExit=yes", "WantedBy=multi-user.target",
	} {
		if !strings.Contains(stdout, want+"\n") {
			t.Errorf("the unit lacks %q:\n%s", want, stdout)
		}
	}
}
