package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/exit"
)

// TestLabNeedsItsDescription: every lab command names the lab's
// description, and a node of it, and says what to fix otherwise, without
// touching anything.
func TestLabNeedsItsDescription(t *testing.T) {
	dir := t.TempDir()
	desc := filepath.Join(dir, "lab.yaml")
	text := "apiVersion: kubeboot.io/v1alpha1\nkind: LabCluster\nname: lab\ndir: " + filepath.Join(dir, "lab") +
		"\nsubnet: 10.89.0.0/24\npodSubnet: 10.244.0.0/16\nnodes: [{name: cp1, role: control-plane}]\n"
	if err := os.WriteFile(desc, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lab", "up"}, "--cluster names the lab's description"},
		{[]string{"lab", "down"}, "--cluster names the lab's description"},
		{[]string{"lab", "exec", "cp1", "--", "true"}, "--cluster names the lab's description"},
		{[]string{"lab", "reboot", "cp1"}, "--cluster names the lab's description"},
		{[]string{"lab", "exec", "--cluster", desc, "w1", "--", "true"}, desc + `: no node "w1": its nodes are cp1`},
		{[]string{"lab", "exec", "--cluster", desc, "cp1"}, "kubeboot lab exec takes what its usage line shows (kubeboot lab exec NODE -- CMD [ARG...] [flags]); got 1 argument"},
		{[]string{"lab", "up", "--cluster", filepath.Join(dir, "missing.yaml")}, "missing.yaml"},
	} {
		code, _, stderr := runCLI(t, tc.args...)
		if code != exit.Usage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, want %d and %q: %s", tc.args, code, exit.Usage, tc.want, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "lab")); !os.IsNotExist(err) {
		t.Errorf("the lab's dir was made: %v", err)
	}
}
