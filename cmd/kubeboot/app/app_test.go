package app

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/controlplane"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/nodelock"
	"github.com/kubeboot/kubeboot/internal/worker"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
	"github.com/kubeboot/kubeboot/pki"
)

// runCLI runs kubeboot in-process on a real run's dependencies and returns
// its exit code and output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCLIWith(t, newDeps(""), args...)
}

// runCLIWith runs kubeboot in-process on d.
func runCLIWith(t *testing.T, d deps, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = runArgs(t.Context(), d, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestExitCodes(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nnode: {advertiseAddress: nope}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The node of the commands that would change one, whose lock another
	// kubeboot holds: a usage error comes before the node lock, so it is
	// still a usage error.
	node := t.TempDir()
	cfg := writeFile(t, t.TempDir(), "node.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\npaths: {kubeconfigDir: "+node+"}\n")
	for _, root := range []string{"", node} {
		lock, err := nodelock.Acquire(root, nodelock.File, "kubeboot test")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lock.Release() })
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"version", []string{"version"}, 0, ""},
		{"unknown flag", []string{"init", "--bogus"}, 2, "error: unknown flag: --bogus: see kubeboot init --help\n"},
		{"bad output format", []string{"version", "-o", "yaml"}, 2, "--output: the value given is no valid text|json"},
		{"extra argument", []string{"version", "x"}, 2, "kubeboot version takes no arguments; got 1 argument (not shown"},
		{"unknown skipped phase", []string{"init", "--config", cfg, "--skip-phases", "nope"}, 2, `error: unknown phase "nope"`},
		{"unknown skipped join phase", []string{"join", "--config", cfg, "--control-plane", "--skip-phases", "nope"}, 2, `error: unknown phase "nope"`},
		{"invalid config", []string{"config", "validate", bad}, 2, "line 3: node.advertiseAddress"},
		{"missing config", []string{"config", "validate", "/nonexistent.yaml"}, 2, "invalid config /nonexistent.yaml:\n  cannot read the file"},
		{"unknown command", []string{"foo"}, 2, "kubeboot takes a subcommand: bootstrap, certs, completion, config"},
		{"unknown phase command", []string{"init", "phase", "cert"}, 2, "kubeboot init phase takes a subcommand: addon, apiserver-config"},
		{"unknown certificate", []string{"certs", "renew", "apiservr", "--root", node}, 2, `unknown certificate or kubeconfig "apiservr"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tt.code, stderr)
			}
			if !strings.Contains(stderr, tt.stderr) {
				t.Errorf("stderr %q lacks %q", stderr, tt.stderr)
			}
			if strings.Count(stderr, "error:") > 1 {
				t.Errorf("error printed more than once: %q", stderr)
			}
		})
	}
}

func TestInvalidConfigWritesNothing(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nnetworking: {podSubnet: 10.96.0.0/16}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	code, stdout, stderr := runCLI(t, "init", "--config", bad, "--root", root, "-o", "json")
	if code != 2 {
		t.Fatalf("exit code %d, want 2; stderr %q", code, stderr)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("invalid config created %s", root)
	}
	var last struct {
		Result struct {
			OK       bool
			ExitCode int
			Error    string
		}
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatalf("last stdout line is not the JSON result: %q", stdout)
	}
	if last.Result.OK || last.Result.ExitCode != 2 || !strings.Contains(last.Result.Error, "overlaps serviceSubnet") {
		t.Errorf("result = %+v", last.Result)
	}
}

// TestResetDeleteNodeIsAWorkers: --delete-node resets a worker; on a
// control-plane node it is refused before anything changes, and a
// --kubeconfig that is no kubeconfig is refused too.
func TestResetDeleteNodeIsAWorkers(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	cluster := writeFile(t, dir, "cluster.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\n")
	code, _, stderr := runCLI(t, "reset", "--root", root, "--force", "--delete-node", "--config", cluster)
	if code != 2 || !strings.Contains(stderr, "--delete-node resets a worker") {
		t.Errorf("reset --delete-node on a control-plane node: exit %d, %s", code, stderr)
	}
	worker := writeFile(t, dir, "worker.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: WorkerConfiguration\nnode: {name: w1}\n")
	notKubeconfig := writeFile(t, dir, "admin.conf", "just: text\n")
	code, _, stderr = runCLI(t, "reset", "--root", root, "--delete-node", "--kubeconfig", notKubeconfig, "--config", worker)
	if code != 2 || !strings.Contains(stderr, "--kubeconfig "+notKubeconfig) {
		t.Errorf("reset --delete-node with a file that is no kubeconfig: exit %d, %s", code, stderr)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("a refused reset created %s", root)
	}
}

// TestCommandsRefuseAKindTheyCannotUse: each command loads its --config
// once and refuses, as a usage error (exit 2), a kind it cannot use,
// naming the file, its kind, the command that takes it and what this
// command takes; config validate takes every kind.
func TestCommandsRefuseAKindTheyCannotUse(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	cluster := writeFile(t, dir, "cluster.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\n")
	joining := writeFile(t, dir, "join.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: JoinConfiguration\ncontrolPlaneEndpoint: 10.0.0.10\njoin: {etcdEndpoints: [https://10.0.0.11:2379]}\n")
	worker := writeFile(t, dir, "worker.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: WorkerConfiguration\n")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"init", "--root", root, "--config", joining}, "invalid config " + joining + ":\n  line 1: a JoinConfiguration is for `kubeboot join --control-plane`; this command takes a ClusterConfiguration\n"},
		{[]string{"diff", "--root", root, "--config", worker}, "invalid config " + worker + ":\n  line 1: a WorkerConfiguration is for `kubeboot join`; this command takes a ClusterConfiguration or JoinConfiguration\n"},
		{[]string{"join", "10.0.0.10:6443", "--token", "abcdef.0123456789abcdef", "--discovery-token-ca-cert-hash", "sha256:" + strings.Repeat("0", 64), "--config", cluster},
			"invalid config " + cluster + ":\n  line 1: a ClusterConfiguration is for `kubeboot init`; this command takes a WorkerConfiguration\n"},
		{[]string{"join", "--control-plane", "--config", worker}, "a WorkerConfiguration is for `kubeboot join`; this command takes a JoinConfiguration\n"},
	} {
		code, _, stderr := runCLI(t, tt.args...)
		if code != 2 || !strings.HasSuffix(stderr, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tt.args, code, stderr, tt.want)
		}
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("a refused run created %s", root)
	}
	for _, path := range []string{cluster, joining, worker} {
		if code, stdout, stderr := runCLI(t, "config", "validate", path); code != 0 || stdout != path+" is valid\n" {
			t.Errorf("config validate %s: exit %d, %s%s", path, code, stdout, stderr)
		}
	}
}

// TestVersionIsADependency: the release Main builds once is what `kubeboot
// version` prints, and what the manifests of kubeboot's own pods carry,
// beside the binary they run: the kubeboot that rendered them. An
// unstamped build is "dev".
func TestVersionIsADependency(t *testing.T) {
	for stamped, want := range map[string]string{"v0.4.0": "v0.4.0", "": "dev"} {
		d := newDeps("")
		d.version.setVersion(stamped, "")
		d.system = workflow.HostSystem(d.version.Version)
		code, stdout, stderr := runCLIWith(t, d, "version")
		if code != 0 || !strings.HasPrefix(stdout, "kubeboot "+stamped) {
			t.Errorf("version: exit %d, %q %s", code, stdout, stderr)
		}
		root := t.TempDir()
		for _, phase := range []string{"etcd", "control-plane", "write-manifests"} {
			if code, _, stderr := runCLIWith(t, d, "init", "phase", phase, "--root", root); code != 0 {
				t.Fatalf("init phase %s: exit %d, %s", phase, code, stderr)
			}
		}
		manifest, err := os.ReadFile(filepath.Join(root, "etc/kubernetes/manifests/kubeboot-csr-approver.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		exe, err = filepath.EvalSymlinks(exe)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range []string{"kubeboot.io/version: " + want + "\n", "path: " + exe + "\n", "image: registry.k8s.io/pause:3.10.2\n"} {
			if !strings.Contains(string(manifest), line) {
				t.Errorf("stamped %q: the approver's manifest lacks %q:\n%s", stamped, line, manifest)
			}
		}
	}
}

func TestVersionJSON(t *testing.T) {
	code, stdout, _ := runCLI(t, "version", "-o", "json")
	var v versionInfo
	if code != 0 || json.Unmarshal([]byte(stdout), &v) != nil {
		t.Fatalf("code %d, stdout %q", code, stdout)
	}
	if v.KubernetesDefault != "v1.36.3" || v.KubernetesMin != "v1.34" || v.KubernetesMax != "v1.36" {
		t.Errorf("version info %+v", v)
	}
}

func TestInitPhaseCommandsMatchRunner(t *testing.T) {
	root := newRootCommand(newDeps(""), &bytes.Buffer{}, &bytes.Buffer{})
	initCmd, _, err := root.Find([]string{"init", "phase"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range initCmd.Commands() {
		got = append(got, c.Name())
	}
	want := []string{"addon", "apiserver-config", "bootstrap-admin", "bootstrap-token", "certs", "certs-renewal", "cluster-info", "control-plane", "csr-approver", "etcd", "kubeconfig", "kubelet-config",
		"kubelet-finalize", "kubelet-start", "mark-control-plane", "preflight", "upload-certs", "upload-config", "validate", "wait", "write-manifests"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("phase commands %v, want %v", got, want)
	}
	addon, _, err := root.Find([]string{"init", "phase", "addon", "kube-proxy"})
	if err != nil || addon.Name() != "kube-proxy" || addon.Parent().Name() != "addon" {
		t.Errorf("init phase addon kube-proxy: %v, %v", addon, err)
	}
}

func TestJoinPhaseHelpListsJoinPhases(t *testing.T) {
	code, stdout, stderr := runCLI(t, "join", "phase", "--help")
	if code != 0 {
		t.Fatalf("join phase --help: exit %d: %s", code, stderr)
	}
	want := []string{"download-certs", "join-preflight", "preflight", "certs-import", "certs", "kubeconfig", "kubelet-config", "kubelet-start",
		"apiserver-config", "etcd-join", "control-plane", "validate", "write-manifests", "wait", "mark-control-plane", "kubelet-finalize", "certs-renewal"}
	if got := controlplane.JoinWorkflow.Names(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("join phases %v, want %v", got, want)
	}
	workerPhases := []string{"preflight", "kubelet-config", "bootstrap-kubeconfig", "kubelet-start", "kubelet-wait-bootstrap"}
	if got := worker.JoinWorkflow.Names(); strings.Join(got, ",") != strings.Join(workerPhases, ",") {
		t.Errorf("worker join phases %v, want %v", got, workerPhases)
	}
	for _, name := range append(want, workerPhases...) {
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(name) + ` +\S`).MatchString(stdout) {
			t.Errorf("join phase --help does not list %s:\n%s", name, stdout)
		}
	}
}

func TestOneHelpTextPerSharedFlag(t *testing.T) {
	help := map[string]map[string]bool{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, name := range []string{"output", "config", "root", "dry-run", "strict", "ignore-preflight-errors"} {
			if f := c.Flags().Lookup(name); f != nil {
				if help[name] == nil {
					help[name] = map[string]bool{}
				}
				help[name][f.Usage] = true
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCommand(newDeps(""), &bytes.Buffer{}, &bytes.Buffer{}))
	for name, texts := range help {
		if len(texts) != 1 {
			t.Errorf("--%s has %d help texts, want one: %v", name, len(texts), texts)
		}
	}
	if len(help["output"]) == 0 || len(help["config"]) == 0 {
		t.Errorf("found no -o or --config flag: %v", help)
	}
}

// TestCLIReferenceDocumentsEveryCommand keeps docs/cli.md in step
// with the command tree.
func TestCLIReferenceDocumentsEveryCommand(t *testing.T) {
	readme, err := os.ReadFile("../../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	root := newRootCommand(newDeps(""), &bytes.Buffer{}, &bytes.Buffer{})
	for _, c := range root.Commands() {
		for _, sub := range append([]*cobra.Command{c}, c.Commands()...) {
			if sub.Hidden || sub.Name() == "help" || sub.Parent().Name() == "completion" || sub.Parent().Name() == "phase" {
				continue
			}
			path := strings.TrimPrefix(sub.CommandPath(), "kubeboot ")
			if !strings.Contains(string(readme), "`kubeboot "+path) {
				t.Errorf("docs/cli.md does not document `kubeboot %s`", path)
			}
		}
	}
}

func TestValidateCommand(t *testing.T) {
	dir := t.TempDir()
	good := "apiVersion: v1\nkind: Pod\nmetadata: {name: etcd, namespace: kube-system}\nspec:\n  containers: [{name: etcd, image: registry.k8s.io/etcd:3.6.8-0}]\n"
	bad := strings.Replace(good, "spec:\n", "spec:\n  serviceAccountName: default\n", 1)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "etcd.yaml"), []byte(good), 0o600))
	must(os.WriteFile(filepath.Join(dir, ".etcd.yaml.tmp-1"), []byte("garbage"), 0o600))

	code, stdout, stderr := runCLI(t, "validate", "--node-name", "node1", dir)
	if code != 0 || stdout != filepath.Join(dir, "etcd.yaml")+": accepted\n" {
		t.Fatalf("code %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	must(os.WriteFile(filepath.Join(dir, "etcd.yaml.bak"), []byte(bad), 0o600))
	code, stdout, stderr = runCLI(t, "validate", "--node-name", "node1", "-o", "json", dir)
	if code != 3 || !strings.Contains(stderr, "error: the kubelet would reject 1 of 2 manifests") {
		t.Fatalf("code %d, stderr %q", code, stderr)
	}
	var results []struct {
		File     string
		Accepted bool
		Errors   []struct{ Field, Resource, Message string }
	}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var r struct {
			File     string
			Accepted bool
			Errors   []struct{ Field, Resource, Message string }
		}
		must(json.Unmarshal([]byte(line), &r))
		results = append(results, r)
	}
	if len(results) != 2 || !results[0].Accepted || results[1].Accepted {
		t.Fatalf("results %+v", results)
	}
	var resources []string
	for _, e := range results[1].Errors {
		resources = append(resources, e.Resource)
	}
	if !strings.Contains(strings.Join(resources, ","), "serviceaccounts") {
		t.Errorf("the rejected file's errors do not name serviceaccounts: %+v", results[1].Errors)
	}
}

func TestInitPhaseDiffWritesNothing(t *testing.T) {
	root := t.TempDir()
	if code, _, stderr := runCLI(t, "init", "--root", root, "--skip-phases", "certs,kubeconfig"); code != 0 {
		t.Fatalf("init: %s", stderr)
	}
	manifest, edited := editSchedulerManifest(t, root)
	code, stdout, stderr := runCLI(t, "init", "phase", "control-plane", "--root", root, "--diff")
	if code != 0 {
		t.Fatalf("code %d: %s", code, stderr)
	}
	want := "-    - --leader-elect=false\n+    - --leader-elect=true\n"
	if !strings.Contains(stdout, want) || strings.Count(stdout, "+++ ") != 1 {
		t.Errorf("diff of the one edited manifest expected, got:\n%s", stdout)
	}
	if after, _ := os.ReadFile(manifest); string(after) != edited {
		t.Error("--diff rewrote the manifest")
	}
	_, stdout, _ = runCLI(t, "init", "phase", "control-plane", "--root", root, "--diff", "-o", "json")
	diffs := 0
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var event map[string]any
		if err := json.Unmarshal([]byte(line), &event); err != nil {
			t.Fatalf("with -o json, stdout line %q is not JSON", line)
		}
		if d, ok := event["diff"].(string); ok && strings.Contains(d, want) {
			diffs++
		}
	}
	if diffs != 1 {
		t.Errorf("want one JSON event carrying the diff, got %d in:\n%s", diffs, stdout)
	}
}

func TestCertsCommands(t *testing.T) {
	root := t.TempDir()
	if code, _, stderr := runCLI(t, "init", "--root", root, "--skip-phases", "etcd,control-plane,validate,write-manifests"); code != 0 {
		t.Fatalf("init: %s", stderr)
	}
	code, stdout, stderr := runCLI(t, "certs", "check-expiration", "--root", root, "-o", "json")
	var rows []expirationRow
	if code != 0 || json.Unmarshal([]byte(stdout), &rows) != nil {
		t.Fatalf("code %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if len(rows) != 19 || rows[len(rows)-1].Name != "csr-approver.conf" {
		t.Fatalf("want 13 certificates and 6 kubeconfigs, got %+v", rows)
	}
	for _, r := range rows {
		if r.Missing || r.External || r.Residual == "expired" {
			t.Errorf("unexpected row %+v", r)
		}
		// Each leaf renews renewBefore (30 days) before its end; a CA never.
		if renews := r.NotAfter.Sub(r.RenewsAt); (r.CA == "") != r.RenewsAt.IsZero() || r.CA != "" && renews != config.DefaultRenewBefore {
			t.Errorf("%s renews at %s, %s before its end", r.Name, r.RenewsAt, renews)
		}
	}
	apiserver := filepath.Join(root, "/etc/kubernetes/pki/apiserver.crt")
	before, _ := os.ReadFile(apiserver)
	key := filepath.Join(root, "/etc/kubernetes/pki/apiserver.key")
	keyBefore, _ := os.ReadFile(key)
	code, _, stderr = runCLI(t, "certs", "renew", "apiserver", "--root", root)
	if code != 0 || !strings.Contains(stderr, "restart to load the new certificates: kube-apiserver (or re-run with --restart)\n") {
		t.Fatalf("code %d, stderr %q", code, stderr)
	}
	after, _ := os.ReadFile(apiserver)
	keyAfter, _ := os.ReadFile(key)
	if string(before) == string(after) || string(keyBefore) != string(keyAfter) {
		t.Error("renew must re-issue apiserver.crt and keep its key")
	}
	// --root renders for another machine: there is nothing to restart.
	if code, _, stderr = runCLI(t, "certs", "renew", "apiserver", "--root", root, "--restart"); code != 0 || !strings.Contains(stderr, "skipped the restart of [kube-apiserver]") {
		t.Errorf("renew --restart under --root: code %d, stderr %q", code, stderr)
	}
	if code, _, stderr = runCLI(t, "certs", "renew", "ca", "--root", root); code != 1 || !strings.Contains(stderr, "does not renew CAs") {
		t.Errorf("renewing a CA: code %d, stderr %q", code, stderr)
	}

	// --due renews only what has come due: nothing, with a year left.
	before, _ = os.ReadFile(apiserver)
	if code, _, stderr = runCLI(t, "certs", "renew", "--due", "--root", root); code != 0 || !strings.Contains(stderr, "nothing is within certificates.renewBefore (720h0m0s) of its end: the next comes due on ") {
		t.Errorf("renew --due, nothing due: code %d, stderr %q", code, stderr)
	}
	if after, _ := os.ReadFile(apiserver); string(after) != string(before) {
		t.Error("renew --due renewed a certificate a year from its end")
	}
	// With a window longer than what is left of every leaf, all renew.
	due := filepath.Join(t.TempDir(), "due.yaml")
	if err := os.WriteFile(due, []byte("apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\ncertificates: {leafValidity: 17520h, renewBefore: 8761h}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr = runCLI(t, "certs", "renew", "--due", "--root", root, "--config", due); code != 0 ||
		!strings.Contains(stderr, "restart to load the new certificates: etcd, kube-apiserver, kube-controller-manager, kube-scheduler") {
		t.Errorf("renew --due, all due: code %d, stderr %q", code, stderr)
	}
	if after, _ := os.ReadFile(apiserver); string(after) == string(before) {
		t.Error("renew --due did not renew the API server's certificate, which had come due")
	}
	if code, _, stderr = runCLI(t, "certs", "renew", "--due", "apiserver", "--root", root); code != 2 || !strings.Contains(stderr, "no names with --due") {
		t.Errorf("renew --due NAME: code %d, stderr %q", code, stderr)
	}
	if code, _, stderr = runCLI(t, "certs", "renew", "--due", "--new-keys", "--root", root); code != 2 || !strings.Contains(stderr, "--due and --new-keys") {
		t.Errorf("renew --due --new-keys: code %d, stderr %q", code, stderr)
	}
}

// TestCheckExpirationOfAFinalizedNode: once kubelet.conf names the
// certificate the kubelet rotates, check-expiration reports that
// certificate's expiry, and names its file.
func TestCheckExpirationOfAFinalizedNode(t *testing.T) {
	root := t.TempDir()
	if code, _, stderr := runCLI(t, "init", "--root", root, "--skip-phases", "etcd,control-plane,validate,write-manifests"); code != 0 {
		t.Fatalf("init: %s", stderr)
	}
	cfg, err := newDeps("").loadCluster("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Certificates.LeafValidity.Duration = 100 * 24 * time.Hour // not the year kubeboot's own certificates have
	s := &phases.Node{Run: &workflow.Run{Files: &files.AtomicWriter{Root: root}}, Config: cfg}
	ca := phasestest.ClusterCA(t, s)
	pair := phasestest.KubeletPair(t, s, ca, cfg.Node.Name)
	spec := pki.KubeconfigSpecs(cfg)[2]
	data, err := pki.RotatedKubeconfig(spec, ca.Cert, pair)
	if err != nil || spec.Name != config.KubeconfigKubelet {
		t.Fatal(spec.Name, err)
	}
	if err := os.WriteFile(filepath.Join(root, cfg.KubeconfigPath(config.KubeconfigKubelet)), data, 0o600); err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := runCLI(t, "certs", "check-expiration", "--root", root, "-o", "json")
	var rows []expirationRow
	if code != 0 || json.Unmarshal([]byte(stdout), &rows) != nil {
		t.Fatalf("code %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	i := slices.IndexFunc(rows, func(r expirationRow) bool { return r.Name == config.KubeconfigKubelet })
	if i < 0 || rows[i].File != "/var/lib/kubelet/pki/kubelet-client-current.pem" || rows[i].Residual != "99d" && rows[i].Residual != "100d" {
		t.Errorf("kubelet.conf's row: %+v", rows)
	}
	_, stdout, _ = runCLI(t, "certs", "check-expiration", "--root", root)
	if !strings.Contains(stdout, "kubelet.conf (/var/lib/kubelet/pki/kubelet-client-current.pem, rotated by the kubelet)") {
		t.Errorf("check-expiration:\n%s", stdout)
	}
}

// editSchedulerManifest turns leader election off in the scheduler manifest
// under root, by hand as an operator would, and returns its path and content.
func editSchedulerManifest(t *testing.T, root string) (manifest, edited string) {
	t.Helper()
	manifest = filepath.Join(root, "/etc/kubernetes/manifests/kube-scheduler.yaml")
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	edited = strings.Replace(string(data), "--leader-elect=true", "--leader-elect=false", 1)
	if err := os.WriteFile(manifest, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	return manifest, edited
}
