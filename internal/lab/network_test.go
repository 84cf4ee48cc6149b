package lab_test

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/kubeboot/kubeboot/internal/lab"
)

// TestNetworkForwards: each node's namespace forwards packets whatever the
// host's value is, as a node's installation sets it, and the host's value
// stays as it was (a fresh machine has it at 0).
func TestNetworkForwards(t *testing.T) {
	requireRoot(t, "creating network namespaces")
	const hostFile = "/proc/sys/net/ipv4/ip_forward"
	hostBefore := readSysctl(t, hostFile)
	c, err := lab.LoadCluster(writeDescription(t, "apiVersion: kubeboot.io/v1alpha1\nkind: LabCluster\nname: kbfwd\ndir: "+t.TempDir()+
		"\nsubnet: 10.89.250.0/24\nnodes: [{name: cp1, role: control-plane}, {name: w1, role: worker}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Cleanup(func() {
		if err := c.TearDownNetwork(ctx); err != nil {
			t.Errorf("tear down: %v", err)
		}
	})
	if err := c.SetUpNetwork(ctx); err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"cp1", "w1"} {
		for _, file := range []string{hostFile, "/proc/sys/net/ipv6/conf/default/forwarding"} {
			out, err := lab.InNamespace(ctx, c.Netns(node), "cat", file).CombinedOutput()
			if err != nil {
				t.Fatalf("read %s in %s: %v: %s", file, node, err, out)
			}
			if got := strings.TrimSpace(string(out)); got != "1" {
				t.Errorf("%s in node %s is %s, want 1", file, node, got)
			}
		}
	}
	if after := readSysctl(t, hostFile); after != hostBefore {
		t.Errorf("the host's %s changed from %s to %s", hostFile, hostBefore, after)
	}
}

func readSysctl(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// TestNetworkLeavesRunNetnsAsItWas: the lab's teardown removes /run/netns
// only when the lab made it; one that was there before, even empty, is
// the host's and stays.
func TestNetworkLeavesRunNetnsAsItWas(t *testing.T) {
	requireRoot(t, "creating network namespaces")
	const dir = "/run/netns"
	cycle := func(t *testing.T) {
		t.Helper()
		c, err := lab.LoadCluster(writeDescription(t, "apiVersion: kubeboot.io/v1alpha1\nkind: LabCluster\nname: kbnsd\ndir: "+t.TempDir()+
			"\nsubnet: 10.89.251.0/24\nnodes: [{name: cp1, role: control-plane}]\n"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = os.Stat(dir)
		before := err == nil
		if err := c.SetUpNetwork(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := c.TearDownNetwork(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(dir); (err == nil) != before {
			t.Errorf("%s was there before the lab: %t; after its teardown: %t", dir, before, err == nil)
		}
	}
	cycle(t)
	if _, err := os.Stat(dir); err == nil {
		return // the host's: the other case cannot be made here
	}
	// The host's own, empty: it stays.
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH); _ = os.Remove(dir) })
	cycle(t)
}

// requireRoot fails the test under CI, and skips it elsewhere, unless it
// runs as root, which what (creating network namespaces, say) needs.
func requireRoot(t *testing.T, what string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal(what + " needs root")
	}
	t.Skip(what + " needs root")
}
