package app

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDiffCommand(t *testing.T) {
	root := t.TempDir()
	if code, _, stderr := runCLI(t, "init", "--root", root); code != 0 {
		t.Fatalf("init: %s", stderr)
	}
	if code, stdout, stderr := runCLI(t, "diff", "--root", root); code != 0 || stdout != "" {
		t.Fatalf("diff of a freshly initialised node: code %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	manifest, edited := editSchedulerManifest(t, root)
	if err := os.Remove(filepath.Join(root, "/etc/kubernetes/pki/apiserver-kubelet-client.crt")); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "diff", "--root", root)
	if code != 1 || !strings.Contains(stderr, "2 file(s) or addon object(s) would change") {
		t.Errorf("code %d, stderr %q", code, stderr)
	}
	for _, want := range []string{
		"-    - --leader-elect=false\n+    - --leader-elect=true\n",
		"# /etc/kubernetes/pki/apiserver-kubelet-client.crt: would create\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if after, _ := os.ReadFile(manifest); string(after) != edited {
		t.Error("diff rewrote the manifest")
	}
	if _, err := os.Stat(filepath.Join(root, "/etc/kubernetes/pki/apiserver-kubelet-client.crt")); err == nil {
		t.Error("diff created the certificate")
	}

	code, stdout, _ = runCLI(t, "diff", "--root", root, "-o", "json")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != 1 || len(lines) != 3 {
		t.Fatalf("want two differences and a result, code 1; got code %d:\n%s", code, stdout)
	}
	var last struct {
		Result struct{ Differences int } `json:"result"`
	}
	if err := json.Unmarshal([]byte(lines[2]), &last); err != nil || last.Result.Differences != 2 {
		t.Errorf("result line %q: %v", lines[2], err)
	}
	if strings.Contains(stdout, "PRIVATE KEY") || strings.Contains(stdout, "CERTIFICATE") {
		t.Error("diff printed key material")
	}
}
