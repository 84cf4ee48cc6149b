//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// labTemplate is the lab config `make lab` uses; every test node is this
// file with its own directory, address and node name.
const (
	labTemplate     = "../../examples/lab.yaml"
	templateDir     = "/tmp/kubeboot-lab"
	templateAddress = "127.0.0.1"
)

// commandTimeout bounds every command, so a hang fails the test.
const commandTimeout = 5 * time.Minute

// node is one lab node: a temp root holding its config files and, under
// dir, every path of its config, on its own loopback address.
type node struct {
	// t is the test that owns the node: its cleanup reports there.
	t *testing.T
	// root holds the config files, patches and dir; every process of the
	// lab names a path under it.
	root string
	// dir is the node's directory: pki, manifests, kubeconfigs, lab files.
	dir  string
	addr string
	name string
	// config is the node's main config file.
	config string
	// labStarted says that lab up ran, so cleanup runs lab down.
	labStarted bool
}

// result is what a command did.
type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// newNode makes a node named e2e-<label> on addr, writes its config and
// registers the cleanup that stops its lab and checks no process remains.
func newNode(t *testing.T, label, addr string) *node {
	t.Helper()
	// A short root keeps the CRI socket path under the 108-byte limit.
	root, err := os.MkdirTemp("", "kb-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, root: root, dir: filepath.Join(root, "n"), addr: addr, name: "e2e-" + label}
	t.Cleanup(n.cleanup)
	n.config = n.writeConfig(t, "kubeboot.yaml", nil)
	return n
}

// writeConfig writes the lab template adapted to this node, with edits
// (dotted field path -> value) applied, and returns its path.
func (n *node) writeConfig(t *testing.T, file string, edits map[string]any) string {
	t.Helper()
	tmpl, err := os.ReadFile(labTemplate)
	if err != nil {
		t.Fatalf("read the lab template: %v", err)
	}
	// A template that stops using these would make every node share them.
	if !strings.Contains(string(tmpl), templateDir) || !strings.Contains(string(tmpl), templateAddress) {
		t.Fatalf("%s no longer puts its paths under %s on %s: update the e2e node helper", labTemplate, templateDir, templateAddress)
	}
	text := strings.ReplaceAll(string(tmpl), templateDir, n.dir)
	text = strings.ReplaceAll(text, templateAddress, n.addr)
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("parse the lab template: %v", err)
	}
	setField(cfg, "node.name", n.name)
	for path, value := range edits {
		setField(cfg, path, value)
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(n.root, file)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// setField sets a dotted field path in a decoded YAML document.
func setField(doc map[string]any, path string, value any) {
	keys := strings.Split(path, ".")
	for _, k := range keys[:len(keys)-1] {
		child, ok := doc[k].(map[string]any)
		if !ok {
			child = map[string]any{}
			doc[k] = child
		}
		doc = child
	}
	doc[keys[len(keys)-1]] = value
}

// path is a path under the node's directory.
func (n *node) path(rel string) string { return filepath.Join(n.dir, rel) }

func (n *node) manifestPath(component string) string {
	return n.path(filepath.Join("manifests", component+".yaml"))
}

func (n *node) socket() string { return n.path("cri.sock") }

// kubeboot runs the kubeboot binary. init and join run with the host
// checks ignored that a test node cannot pass, as lab up ignores them (see
// hostNodeIgnored).
func (n *node) kubeboot(t *testing.T, args ...string) result {
	t.Helper()
	if len(args) > 0 && (args[0] == "init" || args[0] == "join") {
		args = append(args, "--ignore-preflight-errors="+hostNodeIgnored)
	}
	return runCommand(t, kubebootBin, args...)
}

// hostNodeIgnored are the host checks of kubeboot's preflight that a test
// node cannot pass: it shares the host's network namespace, whose
// forwarding the tests leave as it is (a fresh machine has it off), its
// kubelet runs from the bin dir, not the PATH, and some tests run init
// before the node's containerd.
const hostNodeIgnored = "FileContent--proc-sys-net-ipv4-ip_forward,FileExisting-kubelet,CRI"

// labUp starts the lab with the node's config and JSON output.
func (n *node) labUp(t *testing.T) result {
	t.Helper()
	n.labStarted = true
	return n.kubeboot(t, "lab", "up", "--config", n.config, "--bin-dir", binDir, "-o", "json")
}

// kubectl runs kubectl with the node's admin.conf; it fails the test on a
// non-zero exit unless the caller polls (see kubectlErr).
func (n *node) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := n.kubectlErr(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kubectlErr runs kubectl with the node's admin.conf.
func (n *node) kubectlErr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	r := runCommand(t, filepath.Join(binDir, "kubectl"), append([]string{"--kubeconfig", n.path("admin.conf")}, args...)...)
	if r.code != 0 {
		return r.stdout, fmt.Errorf("kubectl %s: exit %d: %s", strings.Join(args, " "), r.code, strings.TrimSpace(r.stderr))
	}
	return r.stdout, nil
}

// crictl runs crictl against the node's CRI socket.
func (n *node) crictl(t *testing.T, args ...string) result {
	t.Helper()
	endpoint := "unix://" + n.socket()
	// An empty config file keeps the host's /etc/crictl.yaml out.
	config := filepath.Join(n.root, "crictl.yaml")
	if err := os.WriteFile(config, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--config", config, "--runtime-endpoint", endpoint, "--image-endpoint", endpoint, "--timeout", "10s"}
	return runCommand(t, filepath.Join(binDir, "crictl"), append(base, args...)...)
}

// runCommand runs a binary to completion, within commandTimeout.
func runCommand(t *testing.T, bin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatalf("run %s %s: %v", filepath.Base(bin), strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s %s did not finish within %s\nstderr: %s", filepath.Base(bin), strings.Join(args, " "), commandTimeout, r.stderr)
	}
	return r
}

// cleanup stops the lab, shows its logs when the test failed, checks that
// no process of the lab remains (killing and reporting any), and removes
// the root unless the test failed.
func (n *node) cleanup() {
	t := n.t
	if n.labStarted {
		if t.Failed() {
			n.dumpLogs()
		}
		r := runCommand(t, kubebootBin, "lab", "down", "--config", n.config, "--bin-dir", binDir)
		if r.code != 0 {
			t.Errorf("lab down exited %d:\n%s", r.code, r.stderr)
		}
	}
	if left := processesUnder(n.root); len(left) > 0 {
		t.Errorf("after lab down, %d processes of the lab remain (killed now):\n%s", len(left), describe(left))
		for _, p := range left {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
	if mounts := mountsUnder(n.root); len(mounts) > 0 {
		t.Errorf("after lab down, mounts under %s remain: %s", n.root, strings.Join(mounts, ", "))
		return
	}
	if t.Failed() {
		// The etcd data is large and tells nothing the logs do not.
		_ = os.RemoveAll(n.path("etcd"))
		t.Logf("kept %s for inspection", n.root)
		return
	}
	if err := os.RemoveAll(n.root); err != nil {
		t.Errorf("remove %s: %v", n.root, err)
	}
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return []string{"(cannot read /proc/self/mountinfo: " + err.Error() + ")"}
	}
	var mounts []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			mounts = append(mounts, fields[4])
		}
	}
	return mounts
}
