//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/bootstrap"
	"github.com/kubeboot/kubeboot/internal/controlplane"
	"github.com/kubeboot/kubeboot/internal/machine"
	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// TestDay2 runs the day-2 commands on one live control-plane machine: diff on a
// fresh node and after a manual edit, then reset and a new init in the
// same directories.
func TestDay2(t *testing.T) {
	alongside(t)
	n := newNode(t, "day2", "10.89.23.0/24")
	if r := n.up(t); r.code != 0 {
		t.Fatalf("init exited %d:\n%s", r.code, r.stderr)
	}
	if !t.Run("diff", func(t *testing.T) { testDiff(t, n) }) {
		return
	}
	t.Run("renew apiserver --restart", func(t *testing.T) { testRenewRestart(t, n) })
	t.Run("upgrade apply", func(t *testing.T) { testUpgradeApply(t, n) })
	t.Run("etcd snapshot and restore", func(t *testing.T) { testRestore(t, n) })
	t.Run("reset and init again", func(t *testing.T) { testReset(t, n) })
}

// testDiff: nothing differs on a freshly initialised node; a manual edit
// of a manifest is shown and exits 1.
func testDiff(t *testing.T, n *node) {
	r := n.kubeboot(t, "diff", "--config", n.config)
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("diff on a fresh node: exit %d (%s), stdout:\n%s\nstderr: %s", r.code, r.took, r.stdout, r.stderr)
	}
	t.Logf("TIMING: diff on a fresh node: %s", r.took)
	path := n.manifestPath("kube-scheduler")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "--leader-elect=true") {
		t.Fatal("the scheduler manifest has no --leader-elect=true")
	}
	edited := strings.Replace(string(data), "--leader-elect=true", "--leader-elect=false", 1)
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	r = n.kubeboot(t, "diff", "--config", n.config)
	if r.code != 1 || !strings.Contains(r.stdout, "-    - --leader-elect=false\n+    - --leader-elect=true\n") {
		t.Errorf("diff after an edit: exit %d, stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	// Put it back as it was, so the node converges again.
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// testRenewRestart: after renew --restart a new API server process runs
// and serves the renewed certificate.
func testRenewRestart(t *testing.T, n *node) {
	before := n.componentPids()["kube-apiserver"]
	old, err := os.ReadFile(n.path("pki/apiserver.crt"))
	if err != nil {
		t.Fatal(err)
	}
	r := n.kubeboot(t, "certs", "renew", "apiserver", "--restart", "--config", n.config)
	if r.code != 0 {
		t.Fatalf("certs renew apiserver --restart exited %d:\n%s", r.code, r.stderr)
	}
	t.Logf("TIMING: certs renew apiserver --restart: %s", r.took)
	renewed, err := os.ReadFile(n.path("pki/apiserver.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(old, renewed) {
		t.Fatal("apiserver.crt was not renewed")
	}
	if after := n.componentPids()["kube-apiserver"]; after == before || after == 0 {
		t.Errorf("kube-apiserver pid %d before, %d after: not a new process", before, after)
	}
	block, _ := pem.Decode(renewed)
	if block == nil {
		t.Fatal("apiserver.crt holds no PEM")
	}
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(n.path("pki/ca.crt"))
	if err != nil || !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("read ca.crt: %v", err)
	}
	raw, err := n.dial("tcp", net.JoinHostPort(n.addr, "6443"))
	if err != nil {
		t.Fatal(err)
	}
	conn := tls.Client(raw, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, ServerName: n.addr})
	if err := conn.Handshake(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if served := conn.ConnectionState().PeerCertificates[0]; !bytes.Equal(served.Raw, block.Bytes) {
		t.Errorf("the API server serves serial %s, not the renewed apiserver.crt", served.SerialNumber)
	}
	if _, err := n.kubectlErr(t, "get", "--raw", "/readyz"); err != nil {
		t.Errorf("API server not ready after the restart: %v", err)
	}
}

// testUpgradeApply: with nothing to change it changes nothing; an etcd
// change is preceded by a snapshot. (TestUpgradeMinor covers the rollback.)
func testUpgradeApply(t *testing.T, n *node) {
	r := n.kubeboot(t, "upgrade", "apply", "--config", n.config)
	if r.code != 0 || !strings.Contains(r.stderr, "every manifest is up to date") {
		t.Fatalf("upgrade apply without a change: exit %d\n%s", r.code, r.stderr)
	}
	t.Logf("TIMING: upgrade apply without a change: %s", r.took)

	etcdConfig := n.writeConfig(t, "etcd-change.yaml", map[string]any{
		"etcd.local.extraArgs": []any{map[string]any{"name": "snapshot-count", "value": "10001"}},
	})
	r = n.kubeboot(t, "upgrade", "apply", "--config", etcdConfig)
	if r.code != 0 {
		t.Fatalf("upgrade apply of an etcd change: exit %d\n%s", r.code, r.stderr)
	}
	t.Logf("TIMING: upgrade apply of an etcd change: %s", r.took)
	snaps, _ := filepath.Glob(n.path("kubeboot/backups/etcd-snapshot-*.db"))
	if len(snaps) != 1 {
		t.Fatalf("want one etcd snapshot in the backups dir, got %v", snaps)
	}
	if st := runCommand(t, filepath.Join(binDir, "etcdutl"), "snapshot", "status", snaps[0], "-w", "json"); st.code != 0 {
		t.Errorf("etcdutl snapshot status: exit %d: %s", st.code, st.stderr)
	}
	if m, _ := os.ReadFile(n.manifestPath("etcd")); !strings.Contains(string(m), "--snapshot-count=10001") {
		t.Error("the etcd manifest does not carry the change")
	}

}

// testRestore: objects come back as they were at the snapshot, after a
// refused corrupt snapshot (nothing changed) and a restore killed once it
// had stopped the control plane, whose re-run converges.
func testRestore(t *testing.T, n *node) {
	n.kubectl(t, "create", "configmap", "restore-kept", "--from-literal=v=before")
	r := n.kubeboot(t, "etcd", "snapshot", "save", "--config", n.config, "-o", "json")
	_, res, err := parseJSONOutput(r.stdout)
	if r.code != 0 || err != nil || res.Snapshot == nil {
		t.Fatalf("etcd snapshot save: exit %d, %v:\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	snapshot := res.Snapshot.Path
	n.kubectl(t, "create", "configmap", "restore-after", "--from-literal=v=after")
	n.kubectl(t, "delete", "configmap", "restore-kept")

	data, err := os.ReadFile(snapshot)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "truncated.db")
	if err := os.WriteFile(bad, data[:len(data)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	pids := n.componentPids()
	r = n.kubeboot(t, "etcd", "restore", "--snapshot", bad, "--config", n.config)
	if r.code != 2 || !strings.Contains(r.stderr, "nothing was changed") {
		t.Fatalf("restore of a truncated snapshot: exit %d:\n%s", r.code, r.stderr)
	}
	if now := n.componentPids(); !maps.Equal(pids, now) {
		t.Errorf("a refused restore changed the control plane: pids %v, then %v", pids, now)
	}

	killedAfter(t, n, "manifests are in", "etcd", "restore", "--snapshot", snapshot, "--config", n.config)
	r = n.kubeboot(t, "etcd", "restore", "--snapshot", snapshot, "--config", n.config)
	if r.code != 0 {
		t.Fatalf("etcd restore after a SIGKILL exited %d:\n%s", r.code, r.stderr)
	}
	t.Logf("TIMING: etcd restore (resumed after SIGKILL; control plane healthy): %s", r.took)
	if v := n.kubectl(t, "get", "configmap", "restore-kept", "-o", "jsonpath={.data.v}"); v != "before" {
		t.Errorf("restore-kept holds %q after the restore, want its value at the snapshot", v)
	}
	if _, err := n.kubectlErr(t, "get", "configmap", "restore-after"); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("restore-after, made after the snapshot, after the restore: %v", err)
	}
	for _, left := range []string{"etcd.before-restore", "etcd.restoring", "kubeboot/backups/restore-journal.json"} {
		if _, err := os.Lstat(n.path(left)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is left after the restore: %v", n.path(left), err)
		}
	}
}

// testReset: reset --force leaves no file kubeboot wrote but the etcd
// snapshots, which it keeps and names, the components stop, and a new
// init in the same directories succeeds.
func testReset(t *testing.T, n *node) {
	r := n.kubeboot(t, "reset", "--config", n.config)
	if r.code != 1 || !strings.Contains(r.stderr, "--force") {
		t.Fatalf("reset without --force over live etcd data: exit %d, stderr: %s", r.code, r.stderr)
	}
	r = n.kubeboot(t, "reset", "--force", "--config", n.config)
	if r.code != 0 {
		t.Fatalf("reset --force exited %d:\n%s", r.code, r.stderr)
	}
	t.Logf("TIMING: reset --force (components stopped, files removed): %s", r.took)
	if pids := n.componentPids(); len(pids) > 0 {
		t.Errorf("components still run after reset: %v", pids)
	}
	if left := kubebootFiles(t, n); len(left) > 0 {
		t.Errorf("kubeboot-owned files left after reset: %s", strings.Join(left, ", "))
	}
	// The snapshots are the cluster's backups: reset keeps them, and says so.
	if snapshots, _ := filepath.Glob(n.path("etcd-snapshots/etcd-snapshot-*.db")); len(snapshots) == 0 || !strings.Contains(r.stderr, "left the etcd snapshots in "+n.path("etcd-snapshots")+" (") {
		t.Errorf("after reset: snapshots %v, and reset said:\n%s", snapshots, r.stderr)
	}
	r = n.up(t)
	if r.code != 0 {
		t.Fatalf("init after reset exited %d:\n%s", r.code, r.stderr)
	}
	t.Logf("TIMING: init after reset: %s", r.took)
}

// kubebootFiles lists the regular files under the node's directory other
// than the kubelet's state, the audit logs and the etcd snapshots:
// everything else is kubeboot's.
func kubebootFiles(t *testing.T, n *node) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(n.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(n.dir, path)
		switch {
		case d.IsDir() && (rel == "audit" || rel == "etcd-snapshots"):
			return filepath.SkipDir
		case d.Type().IsRegular() && (!strings.HasPrefix(rel, "kubelet/") || rel == "kubelet/config.yaml"):
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestUpgradeMinor inits a control-plane machine at v1.35.4 (its images
// hold the binaries of <bin dir>/v1.35) and upgrades it to v1.36.3
// with `upgrade apply`: first with a failing API server flag, rolled back;
// then killed with SIGKILL once between two components and
// once inside a step, and run again: the re-run completes the upgrade, the
// data written before it is still there, and the manifest dir never lacks
// a component, and kube-system/kubeadm-config names v1.36.3.
func TestUpgradeMinor(t *testing.T) {
	alongside(t)
	if _, err := os.Stat(filepath.Join(binDir, "v1.35", "kube-apiserver")); err != nil {
		t.Fatalf("no v1.35 binaries in %s/v1.35 (`make binaries` builds them): %v", binDir, err)
	}
	n := newNodes(t, "upgrade", "10.89.24.0/24", []string{"v1.35.4"}, "upgrade")[0]
	n.config = n.writeConfig(t, "v135.yaml", map[string]any{"kubernetesVersion": "v1.35.4"})
	if r := n.up(t); r.code != 0 {
		t.Fatalf("init at v1.35.4 exited %d:\n%s", r.code, r.stderr)
	}
	if v := n.serverVersion(t); v != "v1.35.4" {
		t.Fatalf("the API server runs %s, want v1.35.4", v)
	}
	n.kubectl(t, "create", "configmap", "before-upgrade", "--from-literal=written=at-v1.35.4")
	r := n.kubeboot(t, "upgrade", "plan", "v1.36.3", "--config", n.config, "-o", "json")
	var plan controlplane.UpgradePlan
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &plan) != nil || len(plan.Nodes) != 1 || plan.ClusterVersion != "v1.35.4" {
		t.Fatalf("upgrade plan v1.36.3: exit %d, %q, %s", r.code, r.stdout, r.stderr)
	}
	for _, c := range plan.Nodes[0].Components {
		if c.Name == "kube-apiserver" && (!strings.HasSuffix(c.From, ":v1.35.4") || !strings.HasSuffix(c.To, ":v1.36.3")) {
			t.Errorf("the plan moves the API server from %s to %s, want v1.35.4 to v1.36.3", c.From, c.To)
		}
	}

	watch := watchManifests(n)
	testRollback(t, n)
	target := n.writeConfig(t, "v136.yaml", nil)
	// Killed between two components: the API server is done.
	killed := killedAfter(t, n, "kube-apiserver upgraded", "upgrade", "apply", "--config", target)
	t.Logf("killed upgrade apply after the API server's step; its last events:\n%s", strings.Join(killed[max(len(killed)-3, 0):], "\n"))
	if v := n.serverVersion(t); v != "v1.36.3" {
		t.Errorf("after the killed run the API server runs %s, want v1.36.3", v)
	}
	// Killed inside a step: the controller manager's new manifest is
	// written, its new instance not yet verified.
	killedAfter(t, n, "wrote "+n.manifestPath("kube-controller-manager"), "upgrade", "apply", "--config", target)

	r = n.kubeboot(t, "upgrade", "apply", "--config", target)
	if r.code != 0 {
		t.Fatalf("upgrade apply after the kills exited %d:\n%s", r.code, r.stderr)
	}
	t.Logf("TIMING: upgrade apply re-run after the kills: %s\n%s", r.took, r.stderr)
	if !strings.Contains(r.stderr, "resuming the interrupted upgrade of kube-controller-manager") ||
		!strings.Contains(r.stderr, "kube-controller-manager upgraded") || !strings.Contains(r.stderr, "kube-scheduler upgraded") {
		t.Error("the re-run did not finish the controller manager's step and upgrade the scheduler")
	}
	polls, gaps := watch()
	t.Logf("the manifest dir was checked %d times during the three runs", polls)
	if polls < 1000 || len(gaps) > 0 {
		t.Errorf("%d checks of the manifest dir; a component had no complete manifest in %d of them: %s", polls, len(gaps), strings.Join(gaps[:min(len(gaps), 10)], "; "))
	}

	for component, version := range n.componentVersions(t) {
		if want := map[string]string{"etcd": "3.6.8"}[component]; want == "" && version != "v1.36.3" || want != "" && version != want {
			t.Errorf("%s reports version %s after the upgrade", component, version)
		}
	}
	if got := n.kubectl(t, "get", "configmap", "before-upgrade", "-o", "jsonpath={.data.written}"); got != "at-v1.35.4" {
		t.Errorf("the ConfigMap written before the upgrade reads %q, want at-v1.35.4", got)
	}
	if got := n.kubectl(t, "-n", "kube-system", "get", "configmap", "kubeadm-config", "-o", "jsonpath={.data.ClusterConfiguration}"); !strings.Contains(got, "kubernetesVersion: v1.36.3\n") {
		t.Errorf("after the upgrade kubeadm-config does not name v1.36.3:\n%s", got)
	}
	snaps, _ := filepath.Glob(n.path("kubeboot/backups/etcd-snapshot-*.db"))
	if len(snaps) == 0 {
		t.Error("no etcd snapshot in the backups dir")
	}
	for _, snap := range snaps {
		if st := runCommand(t, filepath.Join(binDir, "etcdutl"), "snapshot", "status", snap, "-w", "json"); st.code != 0 {
			t.Errorf("etcdutl snapshot status %s: exit %d: %s", snap, st.code, st.stderr)
		}
	}
	if _, err := os.Stat(n.path("kubeboot/backups/upgrade-journal.json")); err == nil {
		t.Error("the upgrade journal outlived the upgrade")
	}
	if r := n.kubeboot(t, "diff", "--config", target); r.code != 0 {
		t.Errorf("diff after the upgrade: exit %d:\n%s", r.code, r.stdout)
	}
}

// testRollback: an upgrade to v1.36.3 whose API server manifest carries a
// flag that makes kube-apiserver exit is rolled back: the v1.35.4 manifest
// is back byte for byte, the API server is healthy on v1.35.4, and the
// command fails.
func testRollback(t *testing.T, n *node) {
	t.Helper()
	before, err := os.ReadFile(n.manifestPath("kube-apiserver"))
	if err != nil {
		t.Fatal(err)
	}
	bad := n.writeConfig(t, "bogus.yaml", map[string]any{
		"apiServer.extraArgs": []any{map[string]any{"name": "bogus-flag", "value": "x"}},
	})
	r := n.kubeboot(t, "upgrade", "apply", "--config", bad, "--timeout", "75s")
	t.Logf("TIMING: upgrade apply with a failing API server, rolled back: %s", r.took)
	if r.code == 0 || !strings.Contains(r.stderr, "rolled back") {
		t.Errorf("upgrade apply with a bogus flag: exit %d\n%s", r.code, r.stderr)
	}
	if after, _ := os.ReadFile(n.manifestPath("kube-apiserver")); !bytes.Equal(before, after) {
		t.Error("the previous kube-apiserver manifest is not back byte for byte")
	}
	if _, err := n.kubectlErr(t, "get", "--raw", "/readyz"); err != nil {
		t.Errorf("API server not ready after the rollback: %v", err)
	}
	if v := n.serverVersion(t); v != "v1.35.4" {
		t.Errorf("after the rollback the API server runs %s, want v1.35.4", v)
	}
}

// killedAfter runs kubeboot with args and -o json in the node's machine,
// and kills it with SIGKILL as soon as it prints an event whose message
// holds msg. It returns the events printed up to then.
func killedAfter(t *testing.T, n *node, msg string, args ...string) []string {
	t.Helper()
	cmd := n.command(t, context.Background(), append([]string{"kubeboot"}, append(args, "-o", "json")...)...)
	kill := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(commandTimeout, kill)
	defer timer.Stop()
	var events []string
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		events = append(events, lines.Text())
		var e event
		if json.Unmarshal(lines.Bytes(), &e) == nil && strings.Contains(e.Msg, msg) {
			kill()
			_ = cmd.Wait()
			return events
		}
	}
	_ = cmd.Wait()
	t.Fatalf("kubeboot %s ended without an event about %q:\n%s\n%s", strings.Join(args, " "), msg, strings.Join(events, "\n"), stderr.String())
	return nil
}

// watchManifests checks the node's four manifests every millisecond until
// the returned function is called, which returns the number of checks and
// a description of each check that found a manifest missing or empty.
func watchManifests(n *node) func() (int, []string) {
	stop := make(chan struct{})
	var polls int
	var gaps []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			polls++
			for _, c := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
				if info, err := os.Stat(n.manifestPath(c)); err != nil || info.Size() == 0 {
					gaps = append(gaps, fmt.Sprintf("%s at %s: %v", c, time.Now().Format("15:04:05.000"), err))
				}
			}
		}
	}()
	return func() (int, []string) {
		close(stop)
		<-done
		return polls, gaps
	}
}

// componentVersions asks each component its version: the API server
// through /version; the controller manager and the scheduler have no
// /version, so their kubernetes_build_info metric, read through their
// secure ports on the node's loopback (where they listen on any node) with
// the admin credentials; etcd through /version on its
// client URL with the healthcheck client certificate.
func (n *node) componentVersions(t *testing.T) map[string]string {
	t.Helper()
	versions := map[string]string{"kube-apiserver": n.serverVersion(t), "etcd": n.etcdVersion(t)}
	buildInfo := regexp.MustCompile(`(?m)^kubernetes_build_info\{.*git_version="([^"]+)"`)
	for component, port := range map[string]string{"kube-controller-manager": "10257", "kube-scheduler": "10259"} {
		metrics := n.kubectl(t, "get", "--raw", "/metrics", "--server", "https://"+net.JoinHostPort("127.0.0.1", port))
		if m := buildInfo.FindStringSubmatch(metrics); m != nil {
			versions[component] = m[1]
		} else {
			t.Errorf("%s's /metrics has no kubernetes_build_info", component)
		}
	}
	return versions
}

// etcdVersion is what etcd's /version says its server version is.
func (n *node) etcdVersion(t *testing.T) string {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(n.path("pki/etcd/healthcheck-client.crt"), n.path("pki/etcd/healthcheck-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(n.path("pki/etcd/ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := n.httpClient(&tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool})
	resp, err := client.Get("https://" + net.JoinHostPort(n.addr, "2379") + "/version")
	if err != nil {
		t.Fatalf("etcd /version: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	var v struct {
		Server string `json:"etcdserver"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("decode etcd /version: %v", err)
	}
	return v.Server
}

// serverVersion is the API server's gitVersion.
func (n *node) serverVersion(t *testing.T) string {
	t.Helper()
	out := n.kubectl(t, "get", "--raw", "/version")
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("decode /version %q: %v", out, err)
	}
	return v.GitVersion
}

// TestUpgradeKubeadmView brings a lab of two machines up at v1.35.4 (a
// control-plane node and a worker that the real `kubeadm join` joined),
// upgrades the control plane to v1.36.3 with `upgrade apply` in cp1 (its
// file's new configuration also raises the cluster's kubelet maxPods), and
// checks that the cluster's view stock kubeadm reads moved with it, as
// kubeadm's own upgrade apply leaves it: kube-system/kubeadm-config names
// v1.36.3 and kubelet-config holds the new KubeletConfiguration; the real
// `kubeadm upgrade plan` on the upgraded node reads v1.36.3 from the
// cluster; and the worker, reset with `kubeadm reset` and given the
// kubelet v1.36.3, joins again with `kubeadm join` v1.36.3 and becomes
// Ready with the uploaded kubelet configuration.
func TestUpgradeKubeadmView(t *testing.T) {
	alongside(t)
	if _, err := os.Stat(filepath.Join(binDir, "v1.35", "kube-apiserver")); err != nil {
		t.Fatalf("no v1.35 binaries in %s/v1.35 (`make binaries` builds them): %v", binDir, err)
	}
	c := startMachineCluster(t, "e2eu", "10.89.11.0/24", "10.249.0.0/16",
		"\n- {name: cp1, role: control-plane}\n- {name: w1, role: worker, join: kubeadm}\nkubernetesVersion: v1.35.4\n")
	r := runCommand(t, kubebootBin, "lab", "up", "--cluster", c.desc, "--bin-dir", binDir, "--package", kubebootDeb)
	if r.code != 0 {
		t.Fatalf("lab up --cluster at v1.35.4 exited %d:\n%s", r.code, testsupport.LastLines(r.stderr, 40))
	}
	t.Logf("TIMING: lab up --cluster (a control-plane node and a kubeadm worker at v1.35.4): %s", r.took.Round(time.Millisecond))
	if got := kubeadmConfigVersion(t, c.labCluster); got != "v1.35.4" {
		t.Fatalf("before the upgrade kubeadm-config names kubernetesVersion %q, want v1.35.4", got)
	}

	moveToV136(t, c.machine(t, "cp1"), 120)
	r = runCommand(t, kubebootBin, "lab", "exec", "--cluster", c.desc, "cp1", "--", "kubeboot", "upgrade", "apply", "--config", bootstrap.ConfigPath)
	if r.code != 0 {
		t.Fatalf("upgrade apply to v1.36.3 exited %d:\n%s", r.code, r.stderr)
	}
	t.Logf("TIMING: upgrade apply v1.35.4 -> v1.36.3 on a lab cluster: %s", r.took.Round(time.Millisecond))

	t.Run("kubeadm-config and kubelet-config describe v1.36.3", func(t *testing.T) {
		if got := kubeadmConfigVersion(t, c.labCluster); got != "v1.36.3" {
			t.Errorf("after the upgrade kubeadm-config names kubernetesVersion %q, want v1.36.3", got)
		}
		var kubelet struct {
			MaxPods int `json:"maxPods"`
		}
		data := c.kubectl(t, "-n", "kube-system", "get", "configmap", "kubelet-config", "-o", "jsonpath={.data.kubelet}")
		if err := yaml.Unmarshal([]byte(data), &kubelet); err != nil || kubelet.MaxPods != 120 {
			t.Errorf("after the upgrade kubelet-config is not the new configuration's (maxPods 120): %v\n%s", err, data)
		}
	})
	t.Run("kubeadm upgrade plan reads v1.36.3", func(t *testing.T) {
		// The version is given, so that kubeadm asks no server online.
		r := runCommand(t, kubebootBin, "lab", "exec", "--cluster", c.desc, "cp1", "--",
			"kubeadm", "upgrade", "plan", "v1.36.3", "--print-config", "--kubeconfig", "/etc/kubernetes/admin.conf")
		out := r.stdout + r.stderr
		if r.code != 0 {
			t.Fatalf("kubeadm upgrade plan exited %d:\n%s", r.code, out)
		}
		for _, want := range []string{"[upgrade/config] Configuration used:", "kubernetesVersion: v1.36.3", "[upgrade/versions] Cluster version: 1.36.3"} {
			if !strings.Contains(out, want) {
				t.Errorf("kubeadm upgrade plan's output lacks %q:\n%s", want, out)
			}
		}
		for _, bad := range []string{"v1.35.4", "Error reading configuration from the Cluster"} {
			if strings.Contains(out, bad) {
				t.Errorf("kubeadm upgrade plan's output has %q:\n%s", bad, out)
			}
		}
	})
	t.Run("a kubeadm worker joins again after the upgrade", func(t *testing.T) {
		w1 := c.machine(t, "w1")
		c.exec(t, "w1", "kubeadm", "reset", "--force")
		c.kubectl(t, "delete", "node", "w1")
		installKubelet(t, w1)
		fields := strings.Fields(c.exec(t, "cp1", "kubeboot", "token", "create", "--config", bootstrap.ConfigPath, "--print-join-command"))
		k, h := slices.Index(fields, "--token"), slices.Index(fields, "--discovery-token-ca-cert-hash")
		if k < 0 || h < 0 || k+1 >= len(fields) || h+1 >= len(fields) {
			t.Fatalf("token create printed no join command: %q", fields)
		}
		join := c.exec(t, "w1", "kubeadm", "join", c.lab.Cluster.Endpoint().String(), "--token", fields[k+1], "--discovery-token-ca-cert-hash", fields[h+1],
			"--node-name", "w1", "--ignore-preflight-errors", "SystemVerification,Swap,FileContent--proc-sys-net-bridge-bridge-nf-call-iptables")
		if !strings.Contains(join, "This node has joined the cluster") {
			t.Errorf("kubeadm join does not say the node joined:\n%s", testsupport.LastLines(join, 20))
		}
		node := c.readyNodes(t, 2)["w1"]
		if v := node.Status.NodeInfo.KubeletVersion; v != "v1.36.3" {
			t.Errorf("w1's kubelet is %s, want v1.36.3", v)
		}
		if pods := node.Status.Capacity.Pods(); pods.Value() != 120 {
			t.Errorf("w1 has room for %s pods, want the uploaded kubelet configuration's maxPods 120", pods)
		}
	})
}

// kubeadmConfigVersion is the kubernetesVersion of the ClusterConfiguration
// in kube-system/kubeadm-config.
func kubeadmConfigVersion(t *testing.T, c *labCluster) string {
	t.Helper()
	var cc struct {
		KubernetesVersion string `json:"kubernetesVersion"`
	}
	data := c.kubectl(t, "-n", "kube-system", "get", "configmap", "kubeadm-config", "-o", "jsonpath={.data.ClusterConfiguration}")
	if err := yaml.Unmarshal([]byte(data), &cc); err != nil {
		t.Fatalf("kubeadm-config's ClusterConfiguration: %v\n%s", err, data)
	}
	return cc.KubernetesVersion
}

// moveToV136 moves the machine's file to v1.36.3, with the cluster's
// kubelet maxPods.
func moveToV136(t *testing.T, m machine.Machine, maxPods int) {
	t.Helper()
	path := filepath.Join(m.Root(), bootstrap.ConfigPath)
	var cfg map[string]any
	if err := yaml.Unmarshal(readFile(t, path), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["kubernetesVersion"] = "v1.36.3"
	kubelet, _ := cfg["kubelet"].(map[string]any)
	extra, _ := kubelet["extraConfig"].(map[string]any)
	if extra == nil {
		t.Fatalf("%s's configuration has no kubelet.extraConfig: %v", m.Name, cfg)
	}
	extra["maxPods"] = maxPods
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, string(data))
}
