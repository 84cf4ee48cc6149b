package lab

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Node is one lab node's runtime: a containerd of its own, whose root,
// state, config, logs and shims' runc state all live under Dir, serving the
// CRI on Socket.
type Node struct {
	// Dir is the lab's directory for the node, <kubeconfigDir>/lab.
	Dir string
	// Socket is the CRI socket: the kubelet's containerRuntimeEndpoint.
	Socket string
	// BinDir holds containerd, its shim, ctr, the CNI plugins (cni/) and
	// the binaries the images are built from.
	BinDir string
	// Supervisor runs containerd and the kubelet and restarts them when
	// they exit, as systemd does on a node (see Daemon.Supervisor).
	Supervisor []string
}

// Containerd is the node's containerd daemon.
func (n Node) Containerd() Daemon {
	return Daemon{Name: "containerd", Dir: n.Dir, Supervisor: n.Supervisor}
}

// Kubelet is the node's kubelet daemon.
func (n Node) Kubelet() Daemon { return Daemon{Name: "kubelet", Dir: n.Dir, Supervisor: n.Supervisor} }

func (n Node) containerdDir(parts ...string) string {
	return filepath.Join(append([]string{n.Dir, "containerd"}, parts...)...)
}

// CNIConfDir is where the node's CNI network configuration goes.
func (n Node) CNIConfDir() string { return filepath.Join(n.Dir, "cni", "net.d") }

func (n Node) cniTemplatePath() string { return filepath.Join(n.Dir, "cni", "template.conflist") }

// Bridge is the name of the node's pod bridge: "kb-" and a hash of the
// node's dir, so nodes that share a network namespace never share a bridge
// (a link name has at most 15 bytes).
func (n Node) Bridge() string {
	sum := sha256.Sum256([]byte(n.Dir))
	return "kb-" + hex.EncodeToString(sum[:])[:12]
}

// cniTemplate is the node's pod network, as a template containerd renders
// into CNIConfDir once the kubelet tells it the node's pod CIDRs (from the
// Node's spec.podCIDRs, which the controller-manager allocates from
// networking.podSubnet): a bridge with the node's pods behind NAT, their
// addresses from those ranges, and port mappings. Until then the node
// reports that its network is not ready, as a node without a CNI does.
func (n Node) cniTemplate() []byte {
	ipam, _ := json.Marshal(filepath.Join(n.Dir, "cni", "ipam"))
	return fmt.Appendf(nil, `{
  "cniVersion": "1.0.0",
  "name": "kubeboot-lab",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %s,
        "ranges": [{{range $i, $r := .PodCIDRRanges}}{{if $i}}, {{end}}[{"subnet": "{{$r}}"}]{{end}}],
        "routes": [{{range $i, $r := .Routes}}{{if $i}}, {{end}}{"dst": "{{$r}}"}{{end}}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, n.Bridge(), ipam)
}

// containerdConfig renders the node's containerd configuration (version 3,
// containerd 2.x). Every directory containerd, its shims and runc write is
// under the node's dir, so nodes never share state and `lab down` finds
// everything. restrict_oom_score_adj: these machines forbid lowering a
// process's oom_score_adj, which runc otherwise does for every sandbox.
func (n Node) containerdConfig(runc string) []byte {
	q := strconv.Quote
	return fmt.Appendf(nil, `# Written by kubeboot lab for this node; rewritten on every lab up.
version = 3
root = %s
state = %s

[grpc]
  address = %s

[ttrpc]
  address = %s

# NRI's socket is one per machine (/run/nri/nri.sock); the lab uses no NRI
# plugin, and nodes must not share it.
[plugins.'io.containerd.nri.v1.nri']
  disable = true

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  enable_unprivileged_ports = false

[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = [%s]
  conf_dir = %s
  conf_template = %s

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = %s
  Root = %s
  SystemdCgroup = false

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = %s

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
`, q(n.containerdDir("root")), q(n.containerdDir("state")), q(n.Socket), q(n.containerdDir("ttrpc.sock")),
		q(filepath.Join(n.BinDir, "cni")), q(n.CNIConfDir()), q(n.cniTemplatePath()),
		q(runc), q(n.containerdDir("runc")), q(SandboxImage))
}

// StartContainerd writes the node's containerd config and starts containerd
// with the bin dir first on its PATH (it finds its shim there), then waits
// for its socket.
func (n Node) StartContainerd(ctx context.Context) error {
	runc, err := exec.LookPath("runc")
	if err != nil {
		return fmt.Errorf("find runc: %w (install it: apt-get install runc)", err)
	}
	if err := os.MkdirAll(n.containerdDir(), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", n.containerdDir(), err)
	}
	if err := os.MkdirAll(n.CNIConfDir(), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", n.CNIConfDir(), err)
	}
	if err := writeAtomic(n.cniTemplatePath(), n.cniTemplate()); err != nil {
		return err
	}
	configPath := n.containerdDir("config.toml")
	if err := writeAtomic(configPath, n.containerdConfig(runc)); err != nil {
		return err
	}
	d := n.Containerd()
	d.Env = append(os.Environ(), "PATH="+n.BinDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	if err := d.Start(filepath.Join(n.BinDir, "containerd"), "--config", configPath); err != nil {
		return err
	}
	if err := waitForSocket(ctx, n.Socket, 30*time.Second); err != nil {
		return fmt.Errorf("containerd did not start (see %s): %w", d.LogFile(), err)
	}
	return nil
}

// waitForSocket waits until something accepts connections on the socket.
func waitForSocket(ctx context.Context, path string, timeout time.Duration) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		conn, err := net.Dial("unix", path)
		if last = err; err != nil {
			return false, nil
		}
		return true, conn.Close()
	})
	if wait.Interrupted(err) && ctx.Err() == nil {
		return last
	}
	return err
}
