package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/exit"
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
		"a JoinConfiguration without controlPlaneEndpoint": "apiVersion: kubeboot.io/v1alpha1\nkind: JoinConfiguration\n",
		"an unknown field": "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nclustername: x\n",
		"no discovery":     "apiVersion: kubeboot.io/v1alpha1\nkind: WorkerConfiguration\n",
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

// TestBootstrapJoinsAControlPlaneNode: a JoinConfiguration makes bootstrap
// join a control-plane node: with join.certificateKey, its download-certs
// waits to discover the cluster with the file's token; without a key or a
// CA on the node, the join
// stops at once (exit 2), as nothing but a new file can fix it. The key
// and the token's secret are in no output, and nothing is written.
func TestBootstrapJoinsAControlPlaneNode(t *testing.T) {
	dir := t.TempDir()
	node := dir + "/node"
	base := "apiVersion: kubeboot.io/v1alpha1\nkind: JoinConfiguration\nnode: {name: cp2, advertiseAddress: 127.0.0.94}\n" +
		"controlPlaneEndpoint: 127.0.0.93:1\ntimeouts: {controlPlane: 1s}\n" +
		"certificates: {dir: " + node + "/pki}\npaths: {manifestsDir: " + node + "/manifests, kubeconfigDir: " + node + "}\n" +
		"etcd: {local: {dataDir: " + node + "/etcd, snapshotsDir: " + node + "/snapshots}}\nkubelet: {configFile: " + node + "/kubelet/config.yaml}\n"
	key := strings.Repeat("cd", 32)
	withKey := writeFile(t, dir, "join.yaml", base+"join: {certificateKey: "+key+", discovery: {apiServerEndpoint: '127.0.0.93:1', token: "+joinToken+
		", caCertHashes: ['sha256:"+strings.Repeat("ab", 32)+"']}}\n")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := runArgs(ctx, newDeps(""), []string{"bootstrap", "--config", withKey, "--retry-interval", "100ms", "--ignore-preflight-errors", hostChecks}, &stdout, &stderr)
	// download-certs waits up to the discovery's 5 minutes for the cluster;
	// the context, as systemd stopping the unit, ends the wait.
	for _, want := range []string{`[download-certs] waiting: reach the API server at "127.0.0.93:1"`} {
		if code == exit.OK || !strings.Contains(stderr.String(), want) {
			t.Errorf("exit %d; stderr lacks %q:\n%s", code, want, stderr.String())
		}
	}
	if out := stdout.String() + stderr.String(); strings.Contains(out, key) || strings.Contains(out, "0123456789abcdef") {
		t.Error("the output holds the certificate key or the token's secret")
	}
	withoutKey := writeFile(t, dir, "nokey.yaml", base)
	code, _, errText := runCLI(t, "bootstrap", "--config", withoutKey, "--retry-interval", "1ms", "--ignore-preflight-errors", hostChecks)
	if code != exit.Usage || strings.Contains(errText, "attempt") || !strings.Contains(errText, "this node has no cluster CA yet") || !strings.Contains(errText, "--certificate-key (join.certificateKey)") {
		t.Errorf("without a key or a CA: exit %d, want %d once:\n%s", code, exit.Usage, errText)
	}
	if entries, _ := os.ReadDir(node); len(entries) > 0 {
		t.Errorf("the failed joins wrote %v", entries)
	}
}

// TestBootstrapUnit: the unit runs bootstrap on the configuration's path,
// once the network and containerd are up, whether that file exists or is
// to be fetched.
func TestBootstrapUnit(t *testing.T) {
	code, stdout, stderr := runCLI(t, "bootstrap", "unit")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"ExecStart=/usr/bin/kubeboot bootstrap --config /etc/kubeboot/node.yaml -o json",
		"After=network-online.target containerd.service",
		"Type=oneshot", "RemainAfterExit=yes", "WantedBy=multi-user.target",
	} {
		if !strings.Contains(stdout, want+"\n") {
			t.Errorf("the unit lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "ConditionPathExists") {
		t.Errorf("the unit runs only where the file exists:\n%s", stdout)
	}
}

// TestBootstrapFetchRefusals: a machine whose --config file is missing is
// refused, exit 2 and no retry, when nothing says where to fetch its file,
// when the URL is not HTTPS or the pin is malformed; nothing is written.
func TestBootstrapFetchRefusals(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "etc/kubeboot/node.yaml")
	cmdline := writeFile(t, dir, "cmdline", "BOOT_IMAGE=/vmlinuz ro quiet\n")
	pin := "sha256:" + strings.Repeat("ab", 32)
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"no source", nil, "holds no file, and neither --config-url nor the kernel command line (" + cmdline + ") names where to fetch it"},
		{"plain HTTP", []string{"--config-url", "http://10.0.0.1/v1/node-file", "--config-ca-hash", pin}, "is not https://host[:port]/path"},
		{"no pin", []string{"--config-url", "https://10.0.0.1/v1/node-file"}, `the CA's pin "" is not sha256:<64 hex digits>`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append([]string{"bootstrap", "--config", path, "--kernel-cmdline", cmdline, "--retry-interval", "1ms"}, tt.args...)...)
			if code != exit.Usage || !strings.Contains(stderr, tt.want) || strings.Contains(stderr, "attempt") {
				t.Errorf("exit %d, want 2 with %q:\n%s", code, tt.want, stderr)
			}
			if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
				t.Errorf("the refused run made %s", filepath.Dir(path))
			}
		})
	}
	bad := writeFile(t, dir, "bad-cmdline", "ro kubeboot.config=https://10.0.0.1/v1/node-file kubeboot.config-ca-hash=sha256:12\n")
	if code, _, stderr := runCLI(t, "bootstrap", "--config", path, "--kernel-cmdline", bad); code != exit.Usage || !strings.Contains(stderr, "the kernel command line's kubeboot.config= and kubeboot.config-ca-hash=") {
		t.Errorf("a bad pin on the kernel command line: exit %d:\n%s", code, stderr)
	}
}
