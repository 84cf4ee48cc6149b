package lab_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/lab"
	"github.com/kubeboot/kubeboot/internal/machine"
)

// TestMachineNodeIsInstalledAsAPackageWould: the layer holds the packages'
// binaries and units where distributions put them, and a node's disk holds
// containerd's configuration, the units enabled and its one file, kept
// secret.
func TestMachineNodeIsInstalledAsAPackageWould(t *testing.T) {
	dir, binDir := t.TempDir(), t.TempDir()
	for _, name := range []string{"kubelet", "kubeadm", "kubectl", "crictl", "containerd", "containerd-shim-runc-v2", "ctr", "kubeboot"} {
		if err := os.WriteFile(filepath.Join(binDir, name), []byte("#!/bin/sh\necho "+name+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	layer, err := lab.UsrLayer(dir, binDir, filepath.Join(binDir, "kubeboot"))
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"bin/kubelet":                                          "echo kubelet",
		"bin/kubeboot":                                         "echo kubeboot",
		"bin/containerd-shim-runc-v2":                          "echo containerd-shim-runc-v2",
		"lib/systemd/system/kubelet.service":                   "ExecStart=/usr/bin/kubelet\n",
		"lib/systemd/system/containerd.service":                "ExecStart=/usr/bin/containerd\n",
		"lib/systemd/system/kubelet.service.d/10-kubeadm.conf": "EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env\n",
	} {
		if data, err := os.ReadFile(filepath.Join(layer, path)); err != nil || !strings.Contains(string(data), want) {
			t.Errorf("%s: %v %q, want it to hold %q", path, err, data, want)
		}
	}
	if _, err := lab.UsrLayer(dir, binDir, filepath.Join(binDir, "kubeboot")); err != nil {
		t.Errorf("a second UsrLayer over the first: %v", err)
	}

	m := machine.Machine{Name: "w1", Dir: filepath.Join(dir, "w1")}
	if err := lab.InstallNode(m, []byte("kind: WorkerConfiguration\n")); err != nil {
		t.Fatal(err)
	}
	root := m.Root()
	info, err := os.Stat(filepath.Join(root, "etc/kubeboot/node.yaml"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("the node's file: %v %v, want mode 0600", info, err)
	}
	if data, err := os.ReadFile(filepath.Join(root, "etc/containerd/config.toml")); err != nil || !strings.Contains(string(data), "SystemdCgroup = true") {
		t.Errorf("containerd's config: %v\n%s", err, data)
	}
	for _, unit := range []string{"containerd.service", "kubelet.service", "kubeboot-lab-images.service", "kubeboot-bootstrap.service"} {
		link := filepath.Join(root, "etc/systemd/system/multi-user.target.wants", unit)
		target, err := os.Readlink(link)
		if err != nil {
			t.Errorf("%s is not enabled: %v", unit, err)
			continue
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(link), target)
		} else {
			target = filepath.Join(layer, strings.TrimPrefix(target, "/usr/"))
		}
		if _, err := os.Stat(target); err != nil {
			t.Errorf("%s links to %s, which is missing: %v", unit, target, err)
		}
	}
	if err := lab.InstallNode(m, []byte("kind: WorkerConfiguration\n")); err != nil {
		t.Errorf("installing a node twice: %v", err)
	}

	// A node that kubeadm brings up gets no file and no bootstrap unit.
	other := machine.Machine{Name: "w2", Dir: filepath.Join(dir, "w2")}
	if err := lab.InstallNode(other, nil); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"etc/kubeboot/node.yaml", "etc/systemd/system/multi-user.target.wants/kubeboot-bootstrap.service"} {
		if _, err := os.Lstat(filepath.Join(other.Root(), path)); err == nil {
			t.Errorf("a kubeadm node has %s", path)
		}
	}
	if _, err := os.Lstat(filepath.Join(other.Root(), "etc/systemd/system/multi-user.target.wants/kubelet.service")); err != nil {
		t.Errorf("a kubeadm node's kubelet.service is not enabled: %v", err)
	}
	// Its kubelet's static pod path, which kubeadm's packages make.
	if info, err := os.Stat(filepath.Join(other.Root(), "etc/kubernetes/manifests")); err != nil || !info.IsDir() {
		t.Errorf("a kubeadm node has no /etc/kubernetes/manifests: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/kubernetes/manifests")); err == nil {
		t.Error("a kubeboot node's disk has /etc/kubernetes/manifests before kubeboot made it")
	}
}
