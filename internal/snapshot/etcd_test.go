package snapshot

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/testsupport"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

// etcdBinary is the etcd that test/tools built: in $KUBEBOOT_BIN_DIR, else
// test/tools/bin. Under CI a missing binary fails the test: CI builds it.
func etcdBinary(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("KUBEBOOT_BIN_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "test", "tools", "bin")
	}
	bin := filepath.Join(dir, "etcd")
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("etcd is missing (%v): build it with `make binaries`", err)
		}
		t.Skipf("etcd is missing (%v): build it with `make binaries`", err)
	}
	return bin
}

// newNode is node-1 (127.0.0.1) writing under root, its progress in log,
// with c's settings beside the defaults (nil for none).
func newNode(t *testing.T, root string, log *bytes.Buffer, c *config.ClusterConfiguration) *phases.Node {
	t.Helper()
	if c == nil {
		c = config.New()
	}
	config.SetDefaults(c, config.Host{Name: "node-1", Address: "127.0.0.1"})
	if errs := config.Validate(c); len(errs) > 0 {
		t.Fatal(errs.ToAggregate())
	}
	n, err := phases.NewNode(phasestest.NewRun(root, output.NewReporter(log, false)), c)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// etcdNode is node-1 on a throw-away root with kubeboot's PKI and a real
// etcd member serving it, holding 20 keys written and one of them
// deleted: the node, its progress, the member's client URL, and the
// revision of the last change.
func etcdNode(t *testing.T) (n *phases.Node, log *bytes.Buffer, endpoint string, rev int64) {
	t.Helper()
	bin := etcdBinary(t)
	log = &bytes.Buffer{}
	n = newNode(t, t.TempDir(), log, nil)
	if err := phasestest.Run(n, phases.Certs); err != nil {
		t.Fatal(err)
	}
	pki := n.Files.HostPath(filepath.Join(n.Config.Certificates.Dir, "etcd"))
	client, peer := fmt.Sprintf("https://127.0.0.1:%d", testsupport.FreePort(t)), fmt.Sprintf("http://127.0.0.1:%d", testsupport.FreePort(t))
	cmd := exec.Command(bin, "--name", "node-1", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "node-1="+peer,
		"--cert-file", filepath.Join(pki, "server.crt"), "--key-file", filepath.Join(pki, "server.key"),
		"--client-cert-auth", "--trusted-ca-file", filepath.Join(pki, "ca.crt"), "--log-level", "error")
	cmd.Stderr = &strings.Builder{}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return n, log, client, putKeys(t, client, etcd.LocalTLS(n.Config, n.Files.HostPath), 20)
}

// putKeys writes n keys and deletes one, once etcd answers, and returns
// the revision of the last change.
func putKeys(t *testing.T, endpoint string, files etcd.TLSFiles, n int) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cli, err := etcd.New(ctx, []string{endpoint}, files)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	for i := range n {
		if _, err := cli.Put(ctx, fmt.Sprintf("/registry/configmaps/default/cm-%d", i), "data"); err != nil {
			t.Fatalf("put: %v", err)
		}
	}
	del, err := cli.Delete(ctx, "/registry/configmaps/default/cm-0")
	if err != nil {
		t.Fatal(err)
	}
	return del.Header.Revision
}
