package app

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/nodelock"
	"github.com/kubeboot/kubeboot/internal/testsupport"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

// TestChangingCommandsTakeTheNodeLock holds the node lock as another run
// would, and expects every command that changes the node to fail at once,
// naming the holder, and to change nothing.
func TestChangingCommandsTakeTheNodeLock(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if code, _, stderr := runCLI(t, "init", "--root", root, "--skip-phases", "etcd,control-plane,validate,write-manifests"); code != 0 {
		t.Fatalf("init: %s", stderr)
	}
	// Commands without --root lock this machine, whatever their config says.
	node := filepath.Join(dir, "node")
	paths := "certificates: {dir: " + node + "/pki}\npaths: {manifestsDir: " + node + "/manifests, kubeconfigDir: " + node + "}\n" +
		"etcd: {local: {dataDir: " + node + "/etcd}}\n"
	// A lab node on the host's network leaves kube-proxy out.
	clusterConfig := writeFile(t, dir, "cluster.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\naddons: {kubeProxy: {disabled: true}}\n"+paths)
	joinConfig := writeFile(t, dir, "join.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: JoinConfiguration\ncontrolPlaneEndpoint: 127.0.0.1:1\n"+
		paths+"join: {etcdEndpoints: [https://127.0.0.1:1]}\n")
	workerConfig := writeFile(t, dir, "worker.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: WorkerConfiguration\n"+
		"certificates: {dir: "+node+"/pki}\npaths: {manifestsDir: "+node+"/manifests, kubeconfigDir: "+node+"}\n")

	tests := []struct {
		name string
		lock string
		args []string
	}{
		{name: "init", lock: root, args: []string{"init", "--root", root}},
		{name: "init phase", lock: root, args: []string{"init", "phase", "certs", "--root", root}},
		{name: "certs renew", lock: root, args: []string{"certs", "renew", "all", "--root", root}},
		{name: "reset", lock: root, args: []string{"reset", "--root", root, "--force"}},
		{name: "join", lock: node, args: []string{"join", "--control-plane", "--config", joinConfig}},
		{name: "join phase", lock: node, args: []string{"join", "phase", "certs", "--control-plane", "--config", joinConfig}},
		{name: "join of a worker", lock: node, args: []string{"join", "127.0.0.1:1", "--token", "abcdef.0123456789abcdef", "--discovery-token-ca-cert-hash", "sha256:" + strings.Repeat("0", 64), "--config", workerConfig}},
		{name: "join phase of a worker", lock: node, args: []string{"join", "phase", "kubelet-config", "127.0.0.1:1", "--token", "abcdef.0123456789abcdef", "--discovery-token-ca-cert-hash", "sha256:" + strings.Repeat("0", 64), "--config", workerConfig}},
		{name: "upgrade apply", lock: node, args: []string{"upgrade", "apply", "--config", clusterConfig}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lockRoot := tt.lock
			if tt.lock == node {
				lockRoot = "" // this machine's
			}
			lock, err := nodelock.Acquire(lockRoot, nodelock.File, "kubeboot init --test")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = lock.Release() }()
			before := phasestest.Snapshot(t, dir)
			start := time.Now()
			code, _, stderr := runCLI(t, tt.args...)
			want := fmt.Sprintf("another kubeboot (pid %d, kubeboot init --test) is changing this node", os.Getpid())
			if code != 1 || !strings.Contains(stderr, want) {
				t.Errorf("exit %d, stderr %q; want 1 and %q", code, stderr, want)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %s to give up", took)
			}
			after := phasestest.Snapshot(t, dir)
			for path, b := range before {
				if after[path] != b {
					t.Errorf("changed %s", path)
				}
			}
			for path := range after {
				if _, ok := before[path]; !ok {
					t.Errorf("created %s", path)
				}
			}
		})
	}
}

// TestDryRunTakesNoLock: a dry run changes nothing, so it neither waits
// for nor blocks a run that does.
func TestDryRunTakesNoLock(t *testing.T) {
	root := t.TempDir()
	lock, err := nodelock.Acquire(root, nodelock.File, "kubeboot init")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Release() }()
	if code, _, stderr := runCLI(t, "init", "--root", root, "--dry-run"); code != 0 {
		t.Errorf("init --dry-run under a held lock: exit %d, %s", code, stderr)
	}
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestMissingPatchesDirFailsBeforeWriting: every command that renders
// manifests checks patchesDir on the node before it writes anything.
func TestMissingPatchesDirFailsBeforeWriting(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	node := filepath.Join(dir, "node")
	paths := "patchesDir: " + node + "/patches\ncertificates: {dir: " + node + "/pki}\n" +
		"paths: {manifestsDir: " + node + "/manifests, kubeconfigDir: " + node + "}\netcd: {local: {dataDir: " + node + "/etcd}}\n"
	clusterConfig := writeFile(t, dir, "cluster.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\naddons: {kubeProxy: {disabled: true}}\n"+paths)
	joinConfig := writeFile(t, dir, "join.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: JoinConfiguration\ncontrolPlaneEndpoint: 127.0.0.1:1\n"+
		paths+"join: {etcdEndpoints: [https://127.0.0.1:1]}\n")
	rootConfig := writeFile(t, dir, "root.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\npatchesDir: /etc/kubeboot/patches\n")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"init", []string{"init", "--root", root, "--config", rootConfig}, "/etc/kubeboot/patches does not exist (looked for " + root + "/etc/kubeboot/patches)"},
		{"init phase", []string{"init", "phase", "certs", "--root", root, "--config", rootConfig}, "patchesDir"},
		{"diff", []string{"diff", "--root", root, "--config", rootConfig}, "patchesDir"},
		{"join", []string{"join", "--control-plane", "--config", joinConfig}, node + "/patches does not exist"},
		{"upgrade apply", []string{"upgrade", "apply", "--config", clusterConfig}, node + "/patches does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := phasestest.Snapshot(t, dir)
			code, _, stderr := runCLI(t, tt.args...)
			if code != 2 || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tt.want)
			}
			after := phasestest.Snapshot(t, dir)
			if len(after) != len(before) {
				t.Errorf("wrote %d files", len(after)-len(before))
			}
			for _, d := range []string{root, node} {
				if _, err := os.Stat(d); !os.IsNotExist(err) {
					t.Errorf("created %s", d)
				}
			}
		})
	}
}

// TestInterruptEndsABlockedStep: SIGINT or SIGTERM (here, the cancelled
// parent context) ends a run even when a step blocks on something that
// does not watch the context, such as opening a FIFO.
func TestInterruptEndsABlockedStep(t *testing.T) {
	d := newDeps("")
	d.interruptGrace = 100 * time.Millisecond
	root := t.TempDir()
	blocked := make(chan struct{})
	defer close(blocked)
	ctx, cancel := context.WithCancel(context.Background())
	load := func() (runSpec, error) {
		r, err := (&initOptions{root: root, dryRun: true}).spec()
		return r, err
	}
	stepStarted := make(chan struct{})
	go func() { <-stepStarted; cancel() }()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	err := d.execute(ctx, "json", &stdout, &stderr, load, func(context.Context, runSpec, *workflow.Run) ([]string, resultOf, error) {
		close(stepStarted)
		<-blocked
		return nil, nil, nil
	})
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("got %v, want an interruption", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %s", took)
	}
	if !strings.Contains(stdout.String(), `"ok":false`) {
		t.Errorf("no failed JSON result: %q", stdout.String())
	}
}

// TestCommandsStopWithTheRootContext: the context Main ends at SIGINT or
// SIGTERM is every command's: a run handed one that has ended stops at
// once, whether it runs phases or serves.
func TestCommandsStopWithTheRootContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	d := newDeps("")
	d.interruptGrace = 100 * time.Millisecond
	dir := t.TempDir()
	kubeconfig := writeFile(t, dir, "csr-approver.conf", unreachableKubeconfig)
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"init", "--root", dir, "--skip-phases", "preflight"}, 1, "error: phase certs: context canceled"},
		{[]string{"csr-approver", "--kubeconfig", kubeconfig, "--health-port", strconv.Itoa(testsupport.FreePort(t))}, 0, "[csr-approver] stopped"},
	} {
		start := time.Now()
		var stdout, stderr bytes.Buffer
		code := runArgs(ctx, d, tt.args, &stdout, &stderr)
		if took := time.Since(start); code != tt.code || took > 5*time.Second || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%v: exit %d after %s, stderr %q; want %d at once and %q", tt.args, code, took, stderr.String(), tt.code, tt.want)
		}
	}
}

// TestJoinCommandGoesToTheResultOnly: the join command, which holds a
// token, is the run's product: on stdout after a successful text run, in
// the JSON result, and in no progress line.
func TestJoinCommandGoesToTheResultOnly(t *testing.T) {
	const join = "kubeboot join 10.0.0.10:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash sha256:00"
	root := t.TempDir()
	load := func() (runSpec, error) { return (&initOptions{root: root}).spec() }
	run := func(format outputFormat, fail error) (string, string, error) {
		var stdout, stderr bytes.Buffer
		err := newDeps("").execute(context.Background(), format, &stdout, &stderr, load, onInit(func(_ context.Context, s *phases.Node) ([]string, error) {
			s.Report.Infof("a progress line")
			s.JoinCommand = join
			return []string{"bootstrap-token"}, fail
		}))
		return stdout.String(), stderr.String(), err
	}
	stdout, stderr, err := run("text", nil)
	if err != nil || stdout != join+"\n" || strings.Contains(stderr, "0123456789abcdef") {
		t.Errorf("text run: err %v, stdout %q, stderr %q", err, stdout, stderr)
	}
	stdout, _, _ = run("text", fmt.Errorf("a later phase failed"))
	if stdout != "" {
		t.Errorf("a failed text run printed %q", stdout)
	}
	stdout, _, err = run("json", nil)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if err != nil || len(lines) < 2 || !strings.Contains(lines[len(lines)-1], `"joinCommand":"`+join+`"`) {
		t.Fatalf("json run: %v\n%s", err, stdout)
	}
	for _, line := range lines[:len(lines)-1] {
		if strings.Contains(line, "0123456789abcdef") {
			t.Errorf("an event holds the token: %s", line)
		}
	}
}

// TestBadDiscoveryFileBeforeTheLock: a worker's join refuses a malformed
// discovery file (exit 2) while another kubeboot holds this machine's
// lock, rather than failing behind the lock.
func TestBadDiscoveryFileBeforeTheLock(t *testing.T) {
	dir := t.TempDir()
	notKubeconfig := writeFile(t, dir, "d.conf", "apiVersion: kubeboot.io/v1alpha1\nkind: JoinConfiguration\n")
	lock, err := nodelock.Acquire("", nodelock.File, "kubeboot init --test")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Release() }()
	code, _, stderr := runCLI(t, "join", "--discovery-file", notKubeconfig)
	if code != 2 || !strings.Contains(stderr, "not a kubeconfig") || strings.Contains(stderr, "another kubeboot") {
		t.Errorf("exit %d, stderr %q; want 2 and the file's problem, not the lock's", code, stderr)
	}
}

// TestRunLeavesTheConfigurationAlone: a run whose steps change the
// configuration they were loaded with fails, saying so; every command's
// run is checked (the e2e suite's init, joins, upgrade, diff and reset
// among them). Steps that only read it pass.
func TestRunLeavesTheConfigurationAlone(t *testing.T) {
	root := t.TempDir()
	load := func() (runSpec, error) { return (&initOptions{deps: newDeps(""), root: root, dryRun: true}).spec() }
	run := func(edit func(*phases.Node)) error {
		var stdout, stderr bytes.Buffer
		return newDeps("").execute(context.Background(), "text", &stdout, &stderr, load, onNode(func(_ context.Context, n *phases.Node) ([]string, error) {
			edit(n)
			return []string{"edit"}, nil
		}))
	}
	if err := run(func(n *phases.Node) { n.Membership.InitialCluster = "node0=https://10.0.0.9:2380" }); err != nil {
		t.Errorf("a run that changed only what it learned: %v", err)
	}
	err := run(func(n *phases.Node) {
		n.Config.Etcd.Local.ExtraArgs = append(n.Config.Etcd.Local.ExtraArgs, config.Arg{Name: "initial-cluster-state", Value: "existing"})
	})
	if err == nil || !strings.Contains(err.Error(), "kubeboot changed its configuration while it ran, which is a bug") || !strings.Contains(err.Error(), "initial-cluster-state") {
		t.Errorf("a run that changed its configuration: %v", err)
	}
}
