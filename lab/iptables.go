package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// kubeletChain is an iptables chain the kubelet creates in the network
// namespace it runs in, and the built-in chains that jump to it.
type kubeletChain struct {
	table, chain string
	hooks        []string
}

// kubeletChains are the kubelet's own chains: its canaries, which tell it
// that someone flushed the tables, the hint of which iptables mode it
// uses, and its firewall against traffic to 127.0.0.0/8 from elsewhere.
var kubeletChains = []kubeletChain{
	{"filter", "KUBE-FIREWALL", []string{"INPUT", "OUTPUT"}},
	{"filter", "KUBE-KUBELET-CANARY", nil},
	{"nat", "KUBE-KUBELET-CANARY", nil},
	{"mangle", "KUBE-KUBELET-CANARY", nil},
	{"mangle", "KUBE-IPTABLES-HINT", nil},
}

// removeKubeletChains removes the chains the lab's kubelets created, once
// the last kubelet on this machine stopped: while another runs they are
// its chains too.
func removeKubeletChains(ctx context.Context) error {
	if kubeletRuns() {
		return nil
	}
	var errs []error
	for _, tool := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(tool); err != nil {
			continue
		}
		for _, c := range kubeletChains {
			if exec.CommandContext(ctx, tool, "-w", "-t", c.table, "-S", c.chain).Run() != nil {
				continue // no such chain
			}
			for _, hook := range c.hooks {
				for exec.CommandContext(ctx, tool, "-w", "-t", c.table, "-D", hook, "-j", c.chain).Run() == nil {
					// -D deletes one jump at a time: repeat until none is left.
				}
			}
			for _, op := range []string{"-F", "-X"} {
				if out, err := exec.CommandContext(ctx, tool, "-w", "-t", c.table, op, c.chain).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Errorf("%s -t %s %s %s: %w: %s", tool, c.table, op, c.chain, err, strings.TrimSpace(string(out))))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// kubeletRuns reports whether any kubelet process runs on this machine.
func kubeletRuns() bool {
	comms, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, comm := range comms {
		if name, err := os.ReadFile(comm); err == nil && strings.TrimSpace(string(name)) == "kubelet" {
			return true
		}
	}
	return false
}
