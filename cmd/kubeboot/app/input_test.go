package app

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Hostile inputs fail at once with an error naming the file: a FIFO never
// blocks, /dev/zero is never read, a huge file is never read whole.
func TestHostileInputFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge")
	if err := os.WriteFile(huge, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 64<<20); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	node := filepath.Join(dir, "node")
	joinConfig := filepath.Join(dir, "join.yaml")
	text := "apiVersion: kubeboot.io/v1alpha1\nkind: JoinConfiguration\ncontrolPlaneEndpoint: 127.0.0.1:1\n" +
		"certificates: {dir: " + node + "/pki}\npaths: {manifestsDir: " + node + "/manifests, kubeconfigDir: " + node + "}\n" +
		"etcd: {local: {dataDir: " + node + "/etcd}}\njoin: {etcdEndpoints: [https://127.0.0.1:1]}\n"
	if err := os.WriteFile(joinConfig, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	joinWith := func(bundle, keyFile string) []string {
		return []string{"join", "--control-plane", "--config", joinConfig, "--certs-bundle", bundle, "--key-file", keyFile}
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"validate /dev/zero", []string{"validate", "/dev/zero"}, 1, `"/dev/zero": not a regular file: it is a character device`},
		{"validate a FIFO", []string{"validate", fifo}, 1, "it is a FIFO"},
		// The kubelet refuses a manifest over 10 MiB: so does validate, unread.
		{"validate a huge file", []string{"validate", huge}, 3, "the kubelet would reject 1 of 1 manifests"},
		{"key file /dev/zero", []string{"certs", "export", "--out", filepath.Join(dir, "b"), "--key-file", "/dev/zero"}, 2, `read bundle key "/dev/zero"`},
		{"key file FIFO", []string{"certs", "export", "--out", filepath.Join(dir, "b"), "--key-file", fifo}, 2, "it is a FIFO"},
		{"huge key file", []string{"certs", "export", "--out", filepath.Join(dir, "b"), "--key-file", huge}, 2, "file too large"},
		{"bundle /dev/zero", joinWith("/dev/zero", key), 2, `read certificate bundle "/dev/zero"`},
		{"bundle FIFO", joinWith(fifo, key), 2, "it is a FIFO"},
		{"huge bundle", joinWith(huge, key), 2, "file too large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			type result struct {
				code   int
				stderr string
			}
			done := make(chan result, 1)
			go func() {
				code, _, stderr := runCLI(t, tt.args...)
				done <- result{code, stderr}
			}()
			select {
			case r := <-done:
				if r.code != tt.code || !strings.Contains(r.stderr, tt.stderr) {
					t.Errorf("exit %d, stderr %q; want %d and %q", r.code, r.stderr, tt.code, tt.stderr)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("blocked for 10s")
			}
		})
	}
}
