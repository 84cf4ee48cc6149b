package app

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigFleet: `config fleet` on examples/fleet.yaml writes every
// node's file and says so; again it writes nothing; a description with a
// mistake exits 2 naming its file and field, and writes nothing.
func TestConfigFleet(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fleet")
	code, stdout, stderr := runCLI(t, "config", "fleet", "--cluster", "../../../examples/fleet.yaml", "--out", dir)
	if code != 0 || !strings.Contains(stdout, "wrote "+filepath.Join(dir, "nodes/cp1.yaml")) || !strings.Contains(stdout, "17 files written, 0 unchanged; the nodes pin the CA sha256:") {
		t.Fatalf("exit %d:\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "config", "fleet", "--cluster", "../../../examples/fleet.yaml", "--out", dir, "-o", "json")
	var result struct {
		Written []string          `json:"written"`
		Nodes   map[string]string `json:"nodes"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &result) != nil || len(result.Written) != 0 || result.Nodes["w2"] != "nodes/w2.yaml" {
		t.Fatalf("second run: exit %d:\n%s%s", code, stdout, stderr)
	}

	bad := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: kubeboot.io/v1alpha1\nkind: Fleet\nnodes:\n- {name: cp1, role: master, address: 10.0.0.11}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	code, _, stderr = runCLI(t, "config", "fleet", "--cluster", bad, "--out", out)
	if code != 2 || !strings.Contains(stderr, bad+`: nodes[0].role: "master": want control-plane or worker`) {
		t.Fatalf("a bad role: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the refused run made %s", out)
	}
	if code, _, stderr = runCLI(t, "config", "fleet", "--out", out); code != 2 || !strings.Contains(stderr, "--cluster and --out are required") {
		t.Errorf("without --cluster: exit %d: %s", code, stderr)
	}
}
