// Package etcdtest runs the real etcd for tests: the binary test/tools
// built, one member on loopback with TLS from kubeboot's etcd PKI, and a
// few keys written through kubeboot's etcd client.
package etcdtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/testsupport"
)

// Binary is the etcd that test/tools built: in $KUBEBOOT_BIN_DIR, else in
// test/tools/bin of the module the test runs in. Under CI a missing binary
// fails the test, since CI builds it; elsewhere it skips the test.
func Binary(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("KUBEBOOT_BIN_DIR")
	if dir == "" {
		dir = filepath.Join(moduleRoot(t), "test", "tools", "bin")
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

// moduleRoot is the nearest directory above the test's own that holds a
// go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// Start runs the real etcd as member node-1 on loopback, serving clients
// over TLS with the etcd PKI in pkiDir (ca.crt, server.crt, server.key)
// and requiring client certificates, until the test ends; it returns the
// member's client URL. The member may not answer yet: PutKeys waits.
func Start(t *testing.T, pkiDir string) string {
	t.Helper()
	client, peer := fmt.Sprintf("https://127.0.0.1:%d", testsupport.FreePort(t)), fmt.Sprintf("http://127.0.0.1:%d", testsupport.FreePort(t))
	cmd := exec.Command(Binary(t), "--name", "node-1", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "node-1="+peer,
		"--cert-file", filepath.Join(pkiDir, "server.crt"), "--key-file", filepath.Join(pkiDir, "server.key"),
		"--client-cert-auth", "--trusted-ca-file", filepath.Join(pkiDir, "ca.crt"), "--log-level", "error")
	cmd.Stderr = &strings.Builder{}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return client
}

// PutKeys writes n keys and deletes one, once etcd answers, and returns
// the revision of the last change.
func PutKeys(t *testing.T, endpoint string, files etcd.TLSFiles, n int) int64 {
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
