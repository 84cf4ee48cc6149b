package app

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResetCommand(t *testing.T) {
	root := t.TempDir()
	if code, _, stderr := runCLI(t, "init", "--root", root); code != 0 {
		t.Fatalf("init: %s", stderr)
	}
	// An etcd member's data: reset removes no other data dir.
	for _, dir := range []string{"snap", "wal"} {
		if err := os.MkdirAll(filepath.Join(root, "/var/lib/etcd/member", dir), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	code, _, stderr := runCLI(t, "reset", "--root", root)
	if code != 1 || !strings.Contains(stderr, "re-run with --force") {
		t.Fatalf("reset without --force over etcd data: code %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(root, "/etc/kubernetes/manifests/etcd.yaml")); err != nil {
		t.Fatal("a refused reset removed the etcd manifest")
	}
	code, _, stderr = runCLI(t, "reset", "--root", root, "--force")
	if code != 0 {
		t.Fatalf("reset --force: code %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"removed /etc/kubernetes/manifests/etcd.yaml", "removed /var/lib/etcd", "left the kubelet"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	// A new init in the same directories starts from scratch and succeeds.
	if code, _, stderr := runCLI(t, "init", "--root", root); code != 0 {
		t.Fatalf("init after reset: %s", stderr)
	}
	if code, _, stderr := runCLI(t, "diff", "--root", root); code != 0 {
		t.Errorf("diff after reset and init: %s", stderr)
	}
}

func TestConfirm(t *testing.T) {
	for answer, want := range map[string]bool{"y\n": true, "YES\n": true, "\n": false, "no\n": false, "": false} {
		var out bytes.Buffer
		if got := confirm(strings.NewReader(answer), &out, "remove?"); got != want || out.String() != "remove? [y/N] " {
			t.Errorf("answer %q: got %v, prompt %q", answer, got, out.String())
		}
	}
}
