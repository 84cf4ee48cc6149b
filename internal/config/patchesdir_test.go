package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckPatchesDir(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc/kubeboot/patches"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/kubeboot/file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, dir, root string
		want            string // substring of the error; "" for none
	}{
		{"none", "", root, ""},
		{"under the root", "/etc/kubeboot/patches", root, ""},
		{"without a root", filepath.Join(root, "etc/kubeboot/patches"), "", ""},
		{"missing", "/etc/kubeboot/nope", root, `patchesDir: /etc/kubeboot/nope does not exist (looked for ` + filepath.Join(root, "etc/kubeboot/nope") + `): create it or remove the field`},
		{"missing without a root", "/nonexistent/patches", "", "patchesDir: /nonexistent/patches does not exist: create it or remove the field"},
		{"a file", "/etc/kubeboot/file", root, "patchesDir: /etc/kubeboot/file is not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New()
			c.PatchesDir = tt.dir
			err := CheckPatchesDir(c, "kubeboot.yaml", tt.root)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var inv *InvalidError
			if !errors.As(err, &inv) || inv.ExitCode() != 2 {
				t.Fatalf("got %v, want an *InvalidError", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "invalid config kubeboot.yaml:") || !strings.Contains(msg, tt.want) {
				t.Errorf("error %q lacks the file or %q", msg, tt.want)
			}
		})
	}
}

// TestCheckPatchesDirStaysInsideRoot: an absolute symlink under --root
// points into the root, as the node will see it, not at this machine's
// directory of that name.
func TestCheckPatchesDirStaysInsideRoot(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "etc/patches")); err != nil {
		t.Fatal(err)
	}
	c := &ClusterConfiguration{PatchesDir: "/etc/patches"}
	err := CheckPatchesDir(c, "node.yaml", root)
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("a patches dir that resolves outside the root: got %v, want it missing inside the root", err)
	}
}
