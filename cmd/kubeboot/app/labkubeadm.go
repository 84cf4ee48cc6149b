package app

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/lab"
	"github.com/kubeboot/kubeboot/phases"
)

// kubeadmRole joins worker w with the real `kubeadm join` and the
// discovery file, in the node's own mount namespace: kubeadm runs in the
// background, writes the kubelet's files, and (finding no init system)
// leaves the kubelet to lab up, which starts it as kubeadm's systemd
// drop-in would; the workflow waits for kubeadm to finish. kubeadm's
// preflight checks that cannot hold in a lab node are ignored, each for
// its reason (see kubeadmIgnored).
func kubeadmRole(w *config.WorkerConfiguration, binDir, discoveryFile string) labRole {
	node := lab.KubeadmNode{Dir: filepath.Join(w.Paths.KubeconfigDir, "lab"), Kubeadm: filepath.Join(binDir, "kubeadm")}
	exited := make(chan error, 1)
	log := filepath.Join(node.Dir, "kubeadm-join.log")
	var joinErr error
	wait := phases.Phase{
		Name:  "kubeadm-join",
		Short: "Wait for the real kubeadm join to finish",
		Run: func(ctx context.Context, s *phases.State) error {
			select {
			case joinErr = <-exited:
			case <-ctx.Done():
				return ctx.Err()
			}
			if joinErr != nil {
				return fmt.Errorf("kubeadm join: %w:\n%s", joinErr, lastLines(readOrEmpty(log), 20))
			}
			s.Report.Infof("kubeadm join succeeded (log: %s)", log)
			return nil
		},
	}
	// As kubeboot join's last phase does, the node is up once Ready: a
	// kubelet slow to register its Node restarts itself after its CSINode
	// retries (about 140 s) and is Ready after that.
	ready := phases.Phase{
		Name:  "kubeadm-node-ready",
		Short: "Wait until the kubeadm-joined Node is Ready",
		Run: func(ctx context.Context, s *phases.State) error {
			kubeconfig, err := os.ReadFile(filepath.Join(lab.KubeadmConfigDir, config.KubeconfigKubelet))
			if err != nil {
				return err
			}
			client, err := phases.NewClient(kubeconfig, "")
			if err != nil {
				return err
			}
			wctx, cancel := context.WithTimeout(ctx, w.Timeouts.TLSBootstrap.Duration)
			defer cancel()
			if _, err := phases.WatchNode(wctx, client, w.Node.Name, nodeReady); err != nil {
				return fmt.Errorf("wait for Node %s to be Ready (log: %s): %w", w.Node.Name, log, err)
			}
			s.Report.Infof("Node %s is Ready", w.Node.Name)
			return nil
		},
	}
	return labRole{
		setup: node.Isolate,
		kubelet: func(ctx context.Context) ([]string, error) {
			patches, err := node.Patches()
			if err != nil {
				return nil, err
			}
			out, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return nil, err
			}
			cmd := exec.CommandContext(ctx, node.Kubeadm, "join", "--discovery-file", discoveryFile,
				"--node-name", w.Node.Name, "--cri-socket", w.Kubelet.ContainerRuntimeEndpoint,
				"--patches", patches, "--ignore-preflight-errors", strings.Join(kubeadmIgnored, ","), "-v", "1")
			cmd.Stdout, cmd.Stderr = out, out
			// kubeadm finds the kubelet on the PATH for its version check.
			cmd.Env = append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"))
			if err := cmd.Start(); err != nil {
				_ = out.Close()
				return nil, fmt.Errorf("start kubeadm join: %w", err)
			}
			go func() { exited <- cmd.Wait(); _ = out.Close() }()
			return node.KubeletArgs(ctx, cmd, log, exited)
		},
		workflow: phases.Runner{Phases: []phases.Phase{wait, ready}},
		done:     fmt.Sprintf("node %s joined with kubeadm and is Ready", w.Node.Name),
	}
}

// kubeadmIgnored are the preflight checks of `kubeadm join` that a lab
// node cannot pass, with why:
//   - SystemVerification: the lab's machines may run cgroup v1, which
//     kubeadm v1.36 refuses, and the kubelet is told to accept
//     (failCgroupV1: false);
//   - Swap: the machine may have swap on; the kubelet is told to accept it
//     (failSwapOn: false);
//   - FileContent--proc-sys-net-bridge-bridge-nf-call-iptables: the node's
//     network namespace has no br_netfilter setting of its own, and the
//     lab's pod traffic is routed rather than bridged to kube-proxy;
//   - Service-Kubelet: there is no systemd; lab up starts the kubelet.
var kubeadmIgnored = []string{"SystemVerification", "Swap", "FileContent--proc-sys-net-bridge-bridge-nf-call-iptables", "Service-Kubelet"}

// nodeReady says whether the Node's Ready condition is true.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readOrEmpty is the file's content, or nothing.
func readOrEmpty(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}
