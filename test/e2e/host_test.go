//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The host a lab runs on must look the same after the lab is down. Labs
// run side by side in this suite, so each test checks only what is its
// own lab's or what no lab may ever touch, and the suite checks the
// whole host once, before and after every test (checkHost).

// netState is what a lab may change on the host's network: its network
// namespaces, links, iptables rules and nftables tables (kube-proxy's
// nftables mode makes a table of its own).
type netState struct {
	namespaces, links, rules, tables []string
}

// readHostNetwork reads the host's network namespaces, links, iptables
// rules (without counters) and nftables tables.
func readHostNetwork() (netState, error) {
	var s netState
	var failed error
	lines := func(name string, args ...string) []string {
		out, err := exec.Command(name, args...).Output()
		if err != nil && failed == nil {
			failed = fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
		}
		var kept []string
		for _, l := range strings.Split(string(out), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				kept = append(kept, l)
			}
		}
		slices.Sort(kept)
		return kept
	}
	for _, l := range lines("ip", "netns", "list") {
		s.namespaces = append(s.namespaces, strings.Fields(l)[0])
	}
	for _, l := range lines("ip", "-o", "link", "show") {
		if f := strings.Fields(l); len(f) > 1 {
			s.links = append(s.links, strings.TrimSuffix(strings.SplitN(f[1], "@", 2)[0], ":"))
		}
	}
	for _, tool := range []string{"iptables-save", "ip6tables-save"} {
		for _, l := range lines(tool) {
			if !strings.HasPrefix(l, ":") { // chain lines carry counters
				s.rules = append(s.rules, tool+": "+l)
			}
		}
	}
	s.tables = lines("nft", "list", "tables")
	return s, failed
}

// hostNetworkState is the host's network as a test of the lab named lab
// sees it: the namespaces of that lab alone (its hub kb-<lab> and its
// nodes' kb-<lab>-<node>), since other labs come and go meanwhile, and
// the host's own links, rules and tables, which no lab changes. An empty
// lab keeps every namespace.
func hostNetworkState(t *testing.T, lab string) netState {
	t.Helper()
	s, err := readHostNetwork()
	if err != nil {
		t.Fatal(err)
	}
	if lab != "" {
		s.namespaces = slices.DeleteFunc(s.namespaces, func(ns string) bool {
			return ns != "kb-"+lab && !strings.HasPrefix(ns, "kb-"+lab+"-")
		})
	}
	return s
}

// nodeDirs are the directories a node's runtime, kubelet and kubeboot
// write. A lab keeps them inside its machines: none may appear on the
// host, nor anything in them, at any time.
var nodeDirs = []string{
	"/etc/kubernetes", "/var/lib/kubelet", "/etc/kubeboot",
	"/var/lib/containerd", "/opt/containerd", "/run/containerd", "/run/nri",
	"/etc/cni", "/opt/cni", "/run/flannel",
}

// nodeFiles lists which of nodeDirs exist on the host, and their entries.
func nodeFiles() []string {
	var names []string
	for _, dir := range nodeDirs {
		entries, err := os.ReadDir(dir)
		if os.IsNotExist(err) {
			continue
		}
		names = append(names, dir)
		for _, e := range entries {
			names = append(names, filepath.Join(dir, e.Name()))
		}
	}
	return names
}

// hostFiles is nodeFiles, the entries of /run and the top level of the
// cgroup hierarchies: what the suite as a whole must leave as it found.
// The lab's shared entries of /run (its registry in /run/kubeboot-labs, the
// network namespaces' /run/netns) come and go with the labs that are up,
// so only the suite can check them.
func hostFiles() []string {
	names := nodeFiles()
	entries, _ := os.ReadDir("/run")
	for _, e := range entries {
		names = append(names, filepath.Join("/run", e.Name()))
	}
	tops, _ := filepath.Glob("/sys/fs/cgroup/*/*/")
	return append(names, tops...)
}

// hostState is the whole host as the suite checks it.
type hostState struct {
	files []string
	net   netState
}

// readHost reads the host's state for checkHost.
func readHost() (hostState, error) {
	net, err := readHostNetwork()
	return hostState{files: hostFiles(), net: net}, err
}

// checkHost says how the host after the suite differs from before it.
func checkHost(before hostState) error {
	after, err := readHost()
	if err != nil {
		return err
	}
	var diffs []string
	for _, d := range []struct {
		what          string
		before, after []string
	}{
		{"files in its node dirs, /run or the cgroups' top level", before.files, after.files},
		{"network namespaces", before.net.namespaces, after.net.namespaces},
		{"links", before.net.links, after.net.links},
		{"iptables rules", before.net.rules, after.net.rules},
		{"nftables tables", before.net.tables, after.net.tables},
	} {
		if !slices.Equal(d.before, d.after) {
			diffs = append(diffs, fmt.Sprintf("the host's %s differ:\nbefore: %q\nafter:  %q", d.what, d.before, d.after))
		}
	}
	if len(diffs) > 0 {
		return fmt.Errorf("the suite left the host changed:\n%s", strings.Join(diffs, "\n"))
	}
	return nil
}
