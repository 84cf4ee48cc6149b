package lab_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/lab"
	"github.com/kubeboot/kubeboot/internal/machine"
)

// TestMachineNodeIsInstalledAsAPackageWould: the layer holds the packages'
// binaries, CNI plugins and units where distributions put them, and a
// node's disk holds containerd's configuration (looking for CNI plugins
// there too, and with no pod network of the lab's), the units enabled
// and its one file, kept secret.
func TestMachineNodeIsInstalledAsAPackageWould(t *testing.T) {
	dir, binDir := t.TempDir(), t.TempDir()
	for _, name := range []string{"kubelet", "kubeadm", "kubectl", "crictl", "containerd", "containerd-shim-runc-v2", "ctr"} {
		if err := os.WriteFile(filepath.Join(binDir, name), []byte("#!/bin/sh\necho "+name+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(binDir, "cni"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"bridge", "host-local", "loopback", "portmap"} {
		if err := os.WriteFile(filepath.Join(binDir, "cni", name), []byte("#!/bin/sh\necho "+name+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	layer, err := lab.UsrLayer(dir, binDir)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"bin/kubelet":                                          "echo kubelet",
		"bin/containerd-shim-runc-v2":                          "echo containerd-shim-runc-v2",
		"lib/cni/bridge":                                       "echo bridge",
		"lib/cni/portmap":                                      "echo portmap",
		"lib/systemd/system/kubelet.service":                   "ExecStart=/usr/bin/kubelet\n",
		"lib/systemd/system/containerd.service":                "ExecStart=/usr/bin/containerd\n",
		"lib/systemd/system/kubelet.service.d/10-kubeadm.conf": "EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env\n",
	} {
		if data, err := os.ReadFile(filepath.Join(layer, path)); err != nil || !strings.Contains(string(data), want) {
			t.Errorf("%s: %v %q, want it to hold %q", path, err, data, want)
		}
	}
	if _, err := lab.UsrLayer(dir, binDir); err != nil {
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
	if data, err := os.ReadFile(filepath.Join(root, "etc/containerd/config.toml")); err != nil || !strings.Contains(string(data), "SystemdCgroup = true") ||
		!strings.Contains(string(data), "bin_dirs = ['/opt/cni/bin', '/usr/lib/cni']") || strings.Contains(string(data), "conf_template") {
		t.Errorf("containerd's config: %v\n%s", err, data)
	}
	if _, err := os.Stat(filepath.Join(layer, "bin/kubeboot")); err == nil {
		t.Error("kubeboot is in the packages' layer: it comes from its own package")
	}
	for _, unit := range []string{"containerd.service", "kubelet.service", "kubeboot-lab-install.service"} {
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
	// The node installs kubeboot's package at its first boot, then enables
	// and starts the package's bootstrap unit.
	install, err := os.ReadFile(filepath.Join(root, "etc/systemd/system/kubeboot-lab-install.service"))
	if err != nil || !strings.Contains(string(install), "ExecStart=/usr/bin/dpkg -i /opt/kubeboot/kubeboot.deb\n") ||
		!strings.Contains(string(install), "ExecStart=/usr/bin/systemctl enable --now --no-block kubeboot-bootstrap.service\n") {
		t.Errorf("the install unit: %v\n%s", err, install)
	}
	if err := lab.InstallNode(m, []byte("kind: WorkerConfiguration\n")); err != nil {
		t.Errorf("installing a node twice: %v", err)
	}

	// A node that kubeadm brings up gets no file, and kubeboot's package
	// without its bootstrap unit enabled.
	other := machine.Machine{Name: "w2", Dir: filepath.Join(dir, "w2")}
	if err := lab.InstallNode(other, nil); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"etc/kubeboot/node.yaml", "etc/systemd/system/multi-user.target.wants/kubeboot-bootstrap.service"} {
		if _, err := os.Lstat(filepath.Join(other.Root(), path)); err == nil {
			t.Errorf("a kubeadm node has %s", path)
		}
	}
	if install, err := os.ReadFile(filepath.Join(other.Root(), "etc/systemd/system/kubeboot-lab-install.service")); err != nil ||
		!strings.Contains(string(install), "dpkg -i") || strings.Contains(string(install), "enable") {
		t.Errorf("a kubeadm node's install unit: %v\n%s", err, install)
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

	// A machine booted from the network holds no file: its bootstrap unit,
	// enabled at its first boot, reads the command line the lab gives it.
	fetching := machine.Machine{Name: "w3", Dir: filepath.Join(dir, "w3")}
	cmdline := "kubeboot.config=https://10.89.0.1:8443/v1/node-file?hostname={hostname} kubeboot.config-ca-hash=sha256:00"
	if err := lab.InstallFetchingNode(fetching, cmdline); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(fetching.Root(), "etc/kubeboot/node.yaml")); err == nil {
		t.Error("a machine booted from the network has a node file")
	}
	if got, err := os.ReadFile(filepath.Join(fetching.Root(), lab.CmdlinePath)); err != nil || string(got) != cmdline+"\n" {
		t.Errorf("its command line: %v %q", err, got)
	}
	dropIn, err := os.ReadFile(filepath.Join(fetching.Root(), "etc/systemd/system/kubeboot-bootstrap.service.d/lab-cmdline.conf"))
	if err != nil || !strings.Contains(string(dropIn), "ExecStart=\nExecStart=/usr/bin/kubeboot bootstrap --config /etc/kubeboot/node.yaml -o json --kernel-cmdline /etc/kubeboot/cmdline\n") {
		t.Errorf("its bootstrap unit's drop-in: %v\n%s", err, dropIn)
	}
	if install, err := os.ReadFile(filepath.Join(fetching.Root(), "etc/systemd/system/kubeboot-lab-install.service")); err != nil ||
		!strings.Contains(string(install), "enable --now --no-block kubeboot-bootstrap.service") {
		t.Errorf("its install unit does not enable the bootstrap unit: %v\n%s", err, install)
	}
}

// fakePackage is a file that starts as a .deb does, for the tests that
// stop before a node installs it.
func fakePackage(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeboot.deb")
	if err := os.WriteFile(path, []byte("!<arch>\ndebian-binary   0           0     0     100644  4         `\n2.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestUpRefusesAMissingPackage: a lab whose package is missing, or is no
// .deb, is refused before anything is set up, naming the file and the
// fix, since its nodes would fail only once booted.
func TestUpRefusesAMissingPackage(t *testing.T) {
	notDeb := filepath.Join(t.TempDir(), "kubeboot")
	if err := os.WriteFile(notDeb, []byte("\x7fELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	for pkg, want := range map[string]string{
		"":                          "kubeboot's package: open : no such file or directory: build it with `make package`",
		"/nonexistent/kubeboot.deb": "open /nonexistent/kubeboot.deb: no such file or directory: build it with `make package`",
		notDeb:                      "kubeboot's package " + notDeb + " is no .deb: build it with `make package`, or name one with --package",
	} {
		dir := t.TempDir()
		desc := writeDescription(t, fmt.Sprintf("apiVersion: kubeboot.io/v1alpha1\nkind: LabCluster\nname: kb-pkg\ndir: %s\nsubnet: 10.89.7.0/24\npodSubnet: 10.254.0.0/16\nnodes: [{name: cp1, role: control-plane}]\n", filepath.Join(dir, "lab")))
		c, err := lab.LoadCluster(desc)
		if err != nil {
			t.Fatal(err)
		}
		var refused *lab.InputError
		_, err = lab.Lab{Cluster: c, Package: pkg, Registry: t.TempDir()}.Up(t.Context(), make(chan lab.Event, 10))
		if !errors.As(err, &refused) || !strings.Contains(err.Error(), want) {
			t.Errorf("package %q: %v, want an InputError with %q", pkg, err, want)
		}
		if _, err := os.Stat(filepath.Join(dir, "lab")); err == nil {
			t.Errorf("package %q: the lab's dir was made", pkg)
		}
	}
}
