package app

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/exit"
	"github.com/kubeboot/kubeboot/lab"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

// TestLabImages: the lab builds every image its bin dir has a binary for,
// for each Kubernetes release there (its CoreDNS too), and leaves the
// others to a pull.
func TestLabImages(t *testing.T) {
	bin := t.TempDir()
	script := func(dir, name, version string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\necho "+version+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"} {
		script(bin, name, "Kubernetes v1.36.3")
		script(filepath.Join(bin, "v1.35"), name, "Kubernetes v1.35.4")
	}
	script(bin, "etcd", "etcd")
	script(bin, "pause", "")
	script(bin, "coredns", "CoreDNS-1.14.2")
	script(filepath.Join(bin, "v1.13"), "coredns", "CoreDNS-1.13.1") // no agnhost: the node pulls it
	if _, err := os.Stat("/usr/sbin/nft"); err != nil && os.Getenv("CI") == "" {
		t.Skip("kube-proxy's image needs the host's nft: apt-get install nftables")
	}

	s := phasestest.NewNode(t, t.TempDir(), config.DefaultKubernetesVersion)
	kubeboot := phasestest.StaticBinary(t) // the CSR approver's image
	build, pull, err := labImages(s.Run, s.Config, bin, kubeboot)
	if err != nil {
		t.Fatal(err)
	}
	var built []string
	for _, img := range build {
		built = append(built, img.Ref)
	}
	slices.Sort(built)
	want := []string{
		"registry.k8s.io/coredns/coredns:v1.13.1", "registry.k8s.io/coredns/coredns:v1.14.2",
		"registry.k8s.io/etcd:3.6.8-0",
		"registry.k8s.io/kube-apiserver:v1.35.4", "registry.k8s.io/kube-apiserver:v1.36.3",
		"registry.k8s.io/kube-controller-manager:v1.35.4", "registry.k8s.io/kube-controller-manager:v1.36.3",
		"registry.k8s.io/kube-proxy:v1.35.4", "registry.k8s.io/kube-proxy:v1.36.3",
		"registry.k8s.io/kube-scheduler:v1.35.4", "registry.k8s.io/kube-scheduler:v1.36.3",
		lab.SandboxImage, "kubeboot.io/kubeboot:dev",
	}
	slices.Sort(want)
	if diff := cmp.Diff(want, built); diff != "" {
		t.Errorf("images built (-want +got):\n%s", diff)
	}
	for _, img := range build {
		if img.Ref == "kubeboot.io/kubeboot:dev" && img.Files["/usr/local/bin/kubeboot"] != kubeboot {
			t.Errorf("the CSR approver's image holds %v, want the running kubeboot %s", img.Files, kubeboot)
		}
		if strings.Contains(img.Ref, "/kube-proxy:") && img.Files["/usr/sbin/nft"] == "" {
			t.Errorf("%s holds %v, want nft for its nftables mode", img.Ref, img.Files)
		}
	}
	if diff := cmp.Diff([]string{lab.AgnhostImage}, pull); diff != "" {
		t.Errorf("images pulled (-want +got):\n%s", diff)
	}
}

// TestLabRefusesKubeProxyOnTheHostNetwork: a single lab node shares the
// host's network namespace, where kube-proxy would program the host's
// packet filter; lab up refuses it before it starts anything.
func TestLabRefusesKubeProxyOnTheHostNetwork(t *testing.T) {
	dir := t.TempDir()
	node := filepath.Join(dir, "node")
	cfgPath := writeFile(t, dir, "lab.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\n"+
		"certificates: {dir: "+node+"/pki}\npaths: {manifestsDir: "+node+"/manifests, kubeconfigDir: "+node+"}\n")
	code, _, stderr := runCLI(t, "lab", "up", "--config", cfgPath, "--bin-dir", dir)
	if code != 2 || !strings.Contains(stderr, cfgPath+": addons.kubeProxy.disabled:") || !strings.Contains(stderr, "set addons.kubeProxy.disabled: true") {
		t.Errorf("exit %d, stderr %q; want 2 naming the file, the field and the fix", code, stderr)
	}
	if _, err := os.Stat(node); err == nil {
		t.Errorf("the refused lab up created %s", node)
	}
}

// TestLabExecAndRebootNeedAMachineNode: lab exec and lab reboot reach a
// node of a lab of machines only, and say what to fix otherwise, without
// touching anything.
func TestLabExecAndRebootNeedAMachineNode(t *testing.T) {
	dir := t.TempDir()
	desc := func(name, extra string) string {
		path := filepath.Join(dir, name)
		text := "apiVersion: kubeboot.io/v1alpha1\nkind: LabCluster\nname: lab\ndir: " + filepath.Join(dir, "lab") +
			"\nsubnet: 10.89.0.0/24\npodSubnet: 10.244.0.0/16\n" + extra + "nodes: [{name: cp1, role: control-plane}]\n"
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	processes, machines := desc("processes.yaml", ""), desc("machines.yaml", "machines: true\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lab", "exec", "cp1", "--", "true"}, "--cluster names the lab of machines the node is in"},
		{[]string{"lab", "reboot", "cp1"}, "--cluster names the lab of machines the node is in"},
		{[]string{"lab", "exec", "--cluster", processes, "cp1", "--", "true"}, processes + ": machines: the lab's nodes are not machines"},
		{[]string{"lab", "reboot", "--cluster", processes, "cp1"}, processes + ": machines: the lab's nodes are not machines"},
		{[]string{"lab", "exec", "--cluster", machines, "w1", "--", "true"}, machines + `: no node "w1": its nodes are cp1`},
		{[]string{"lab", "exec", "--cluster", machines, "cp1"}, "requires at least 2 arg(s)"},
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
