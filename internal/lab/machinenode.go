package lab

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/kubeboot/kubeboot/internal/bootstrap"
	"github.com/kubeboot/kubeboot/internal/machine"
)

// A machine node is a lab node that is a machine of its own (package
// machine) installed as a distribution installs a Kubernetes node:
// containerd and the kubelet from their packages, as systemd services,
// and kubeboot from its own package, which the node installs with dpkg at
// its first boot, then enables and starts its bootstrap unit, as a
// provisioned node's first boot does. The lab's part is only what a node
// image holds: the packages' files (UsrLayer), kubeboot's .deb, the images
// preloaded into containerd, and the node's one file.

// The units and files of the packages a machine node has, as Debian's
// containerd and the Kubernetes project's kubelet packages install them.
const (
	containerdUnit = `[Unit]
Description=containerd container runtime
After=network.target local-fs.target

[Service]
ExecStart=/usr/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity

[Install]
WantedBy=multi-user.target
`
	kubeletUnit = `[Unit]
Description=kubelet: The Kubernetes Node Agent
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
`
	// kubeadmDropIn is the drop-in the kubelet's package ships for
	// kubeadm: the kubelet runs with the files kubeadm writes.
	kubeadmDropIn = `[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
`
	// machineContainerdConfig is the node's /etc/containerd/config.toml:
	// the systemd cgroup driver, the pinned sandbox image, and the CNI
	// plugins' two directories (usrCNIDir); the pod network's
	// configuration comes from its DaemonSet. restrict_oom_score_adj: this host
	// forbids lowering a process's oom_score_adj, which runc otherwise does
	// for every sandbox.
	machineContainerdConfig = `version = 3

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true

[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ['/opt/cni/bin', '` + usrCNIDir + `']
  conf_dir = '/etc/cni/net.d'

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  SystemdCgroup = true

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = '` + SandboxImage + `'
`
	// machinePackage is where a machine node sees kubeboot's .deb.
	machinePackage = "/opt/kubeboot/kubeboot.deb"
	// installUnit installs kubeboot's package at a node's first boot.
	installUnit = "kubeboot-lab-install"
)

// installUnitText is installUnit's unit: dpkg -i of the package, once,
// and, on a node kubeboot brings up (bootstrap), the package's bootstrap
// unit enabled and started, as a provisioned node's first boot does
// (cloud-init's runcmd, a PXE post-install script).
func installUnitText(bootstrap bool) string {
	enable := ""
	if bootstrap {
		enable = "ExecStart=/usr/bin/systemctl enable --now --no-block kubeboot-bootstrap.service\n"
	}
	return `[Unit]
Description=Install kubeboot from its package, as a provisioned node's first boot does
After=local-fs.target
ConditionPathExists=!/var/lib/dpkg/info/kubeboot.list

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/dpkg -i ` + machinePackage + `
` + enable + `
[Install]
WantedBy=multi-user.target
`
}

// checkPackage refuses a path that is no Debian package: the nodes would
// fail to install it only once booted.
func checkPackage(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("kubeboot's package: %w: build it with `make package`, or name one with --package", err)
	}
	defer func() { _ = f.Close() }()
	head := make([]byte, 21)
	if _, err := io.ReadFull(f, head); err != nil || string(head) != "!<arch>\ndebian-binary" {
		return fmt.Errorf("kubeboot's package %s is no .deb: build it with `make package`, or name one with --package", path)
	}
	return nil
}

// usrBinaries are the binaries of a machine node's packages, by their
// names in the bin dir.
var usrBinaries = []string{"kubelet", "kubeadm", "kubectl", "crictl", "containerd", "containerd-shim-runc-v2", "ctr"}

// cniPlugins are the CNI plugins of a machine node's packages, by their
// names in the bin dir's cni/: those flannel's plugin hands a pod to.
var cniPlugins = []string{"bridge", "host-local", "loopback", "portmap"}

// usrCNIDir is where a machine node's CNI plugins are, as Debian's
// containernetworking-plugins installs them; containerd looks there and
// in /opt/cni/bin, where flannel's DaemonSet installs its own plugin.
const usrCNIDir = "/usr/lib/cni"

// UsrLayer writes, under dir/usr, what a machine node's packages install
// in /usr: the binaries of binDir in bin/, its CNI plugins in lib/cni/,
// and containerd's and the kubelet's units (with the kubeadm drop-in) in
// lib/systemd/system/.
// Every machine node of the lab lays it over the host's /usr; kubeboot
// comes from its own package.
func UsrLayer(dir, binDir string) (string, error) {
	layer := filepath.Join(dir, "usr")
	for _, d := range []string{"bin", "lib/cni", "lib/systemd/system/kubelet.service.d"} {
		if err := os.MkdirAll(filepath.Join(layer, d), 0o755); err != nil {
			return "", err
		}
	}
	sources := map[string]string{}
	for _, name := range usrBinaries {
		sources[filepath.Join("bin", name)] = filepath.Join(binDir, name)
	}
	for _, name := range cniPlugins {
		sources[filepath.Join("lib/cni", name)] = filepath.Join(binDir, "cni", name)
	}
	for path, src := range sources {
		if err := linkOrCopy(src, filepath.Join(layer, path)); err != nil {
			return "", fmt.Errorf("the machine nodes' /usr: %w", err)
		}
	}
	for path, content := range map[string]string{
		"lib/systemd/system/containerd.service":                containerdUnit,
		"lib/systemd/system/kubelet.service":                   kubeletUnit,
		"lib/systemd/system/kubelet.service.d/10-kubeadm.conf": kubeadmDropIn,
	} {
		if err := os.WriteFile(filepath.Join(layer, path), []byte(content), 0o644); err != nil {
			return "", err
		}
	}
	return layer, nil
}

// linkOrCopy hard-links src to dst, or copies it across file systems.
func linkOrCopy(src, dst string) error {
	if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if os.Link(src, dst) == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// Machine is the cluster's i-th node as a machine: in dir/<node>, on the
// node's network namespace, with the layer over its /usr, kubeboot's
// package pkg and the node's extra mounts.
func (c *Cluster) Machine(i int, dir, layer, pkg string) machine.Machine {
	name := c.Nodes[i].Name
	readOnly, readWrite := c.Nodes[i].mounts()
	return machine.Machine{
		Name: name, Dir: filepath.Join(dir, name), NetNS: filepath.Join("/run/netns", c.Netns(name)),
		UsrLayers: []string{layer},
		Binds:     append([]string{pkg + ":" + machinePackage}, readOnly...),
		Shared:    readWrite,
	}
}

// InstallNode writes onto a machine's disk what a provisioned node holds
// before its first boot: containerd's configuration,
// containerd, the kubelet, the images' unit and the unit that installs
// kubeboot's package enabled, and nodeFile, the node's one input, at
// bootstrap.ConfigPath. A nil nodeFile is a node that another tool,
// such as kubeadm, brings up: it gets neither the file nor kubeboot's
// bootstrap unit enabled, but the static pod path
// /etc/kubernetes/manifests that kubeadm's packages make.
func InstallNode(m machine.Machine, nodeFile []byte) error {
	return installNode(m, nodeFile, "")
}

// InstallFetchingNode writes onto a machine's disk what a machine booted
// from the network holds: InstallNode's, with kubeboot's bootstrap unit
// enabled but no node file, which the unit fetches as cmdline, the
// machine's kernel command line, says (kubeboot.config=,
// kubeboot.config-ca-hash=). A machine of the lab sees the host's
// /proc/cmdline, so cmdline goes to CmdlinePath, which a drop-in of the
// unit names to bootstrap's --kernel-cmdline.
func InstallFetchingNode(m machine.Machine, cmdline string) error {
	return installNode(m, nil, cmdline)
}

// CmdlinePath is where a fetching node of the lab holds the kernel
// command line it stands for.
const CmdlinePath = "/etc/kubeboot/cmdline"

// cmdlineDropIn has the bootstrap unit read CmdlinePath for the kernel's
// command line.
const cmdlineDropIn = `[Service]
ExecStart=
ExecStart=/usr/bin/kubeboot bootstrap --config ` + bootstrap.ConfigPath + ` -o json --kernel-cmdline ` + CmdlinePath + `
`

// installNode is InstallNode, or with a cmdline InstallFetchingNode.
func installNode(m machine.Machine, nodeFile []byte, cmdline string) error {
	if err := m.Prepare(); err != nil {
		return err
	}
	fetching := cmdline != ""
	etc := filepath.Join(m.Root(), "etc")
	type file struct {
		path    string
		content []byte
		mode    os.FileMode
	}
	files := []file{
		{"etc/containerd/config.toml", []byte(machineContainerdConfig), 0o644},
		{"etc/systemd/system/" + installUnit + ".service", []byte(installUnitText(nodeFile != nil || fetching)), 0o644},
	}
	units := map[string]string{
		"containerd.service":     "/usr/lib/systemd/system/containerd.service",
		"kubelet.service":        "/usr/lib/systemd/system/kubelet.service",
		installUnit + ".service": "../" + installUnit + ".service",
	}
	switch {
	case nodeFile != nil:
		// It may hold the bootstrap token.
		files = append(files, file{bootstrap.ConfigPath, nodeFile, 0o600})
	case fetching:
		files = append(files, file{CmdlinePath, []byte(cmdline + "\n"), 0o644},
			file{"etc/systemd/system/kubeboot-bootstrap.service.d/lab-cmdline.conf", []byte(cmdlineDropIn), 0o644})
	default:
		// The kubelet's package makes the static pod path for kubeadm,
		// whose join does not; a kubelet without it logs an error every
		// second.
		if err := os.MkdirAll(filepath.Join(etc, "kubernetes/manifests"), 0o755); err != nil {
			return err
		}
	}
	for _, f := range files {
		path := filepath.Join(m.Root(), f.path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, f.content, f.mode); err != nil {
			return err
		}
		// WriteFile keeps the mode of a file that exists.
		if err := os.Chmod(path, f.mode); err != nil {
			return err
		}
	}
	wants := filepath.Join(etc, "systemd/system/multi-user.target.wants")
	if err := os.MkdirAll(wants, 0o755); err != nil {
		return err
	}
	for unit, target := range units {
		if err := os.Symlink(target, filepath.Join(wants, unit)); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return nil
}
