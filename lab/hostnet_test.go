package lab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestInNamedNetworkNamespace(t *testing.T) {
	in, err := InNamedNetworkNamespace()
	if err != nil || in {
		t.Fatalf("the test's own namespace: %v, %v; want false", in, err)
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("creating a network namespace needs root")
		}
		t.Skip("creating a network namespace needs root")
	}
	name := "kb-test-hostnet"
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", name).Run() })
	test, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary run again inside the namespace reports it.
	cmd := exec.Command("nsenter", "--net="+filepath.Join(namedNetnsDir, name), "--", test, "-test.run=TestInNamedNetworkNamespaceChild")
	cmd.Env = append(os.Environ(), "KUBEBOOT_NETNS_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "in a named network namespace: true") {
		t.Errorf("inside %s: %v:\n%s", name, err, out)
	}
}

// TestInNamedNetworkNamespaceChild is TestInNamedNetworkNamespace's child,
// run inside the namespace; alone it checks nothing.
func TestInNamedNetworkNamespaceChild(t *testing.T) {
	if os.Getenv("KUBEBOOT_NETNS_CHILD") == "" {
		return
	}
	in, err := InNamedNetworkNamespace()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("in a named network namespace: %v\n", in)
}
