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
// its reason (see kubeadmIgnored). Its steps report through run.
func kubeadmRole(run *phases.Run, w *config.WorkerConfiguration, binDir, discoveryFile string) labRole {
	node := lab.KubeadmNode{Dir: filepath.Join(w.Paths.KubeconfigDir, "lab"), Kubeadm: filepath.Join(binDir, "kubeadm"), Name: w.Node.Name, Address: w.Node.Address}
	exited := make(chan error, 1)
	log := filepath.Join(node.Dir, "kubeadm-join.log")
	wait := kubeadmExit("kubeadm-join", log, exited)
	// As kubeboot join's last phase does, the node is up once Ready: a
	// kubelet slow to register its Node restarts itself after its CSINode
	// retries (about 140 s) and is Ready after that.
	ready := phases.Phase[*phases.Run]{
		Name:  "kubeadm-node-ready",
		Short: "Wait until the kubeadm-joined Node is Ready",
		Run: func(ctx context.Context, s *phases.Run) error {
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
	args := []string{"join", "--discovery-file", discoveryFile, "--node-name", w.Node.Name, "--cri-socket", w.Kubelet.ContainerRuntimeEndpoint, "--patches", node.PatchesDir()}
	return labRole{
		setup:    node.Isolate,
		kubelet:  startKubeadm(node, binDir, log, args, exited),
		workflow: runKubeadm(run, wait, ready),
		done:     fmt.Sprintf("node %s joined with kubeadm and is Ready", w.Node.Name),
	}
}

// kubeadmInitRole inits the cluster on this node with the real `kubeadm
// init` and the kubeadm configuration file lab up --cluster wrote (see
// lab.Cluster.KubeadmInitConfig), in the node's own mount namespace, as
// kubeadmRole joins: kubeadm runs in the background and lab up starts the
// kubelet once kubeadm has written its files. kube-proxy is left out:
// kubeadm's DaemonSet mounts the host's /run/xtables.lock and /lib/modules,
// which a lab node must not touch (and the single-node lab needs no
// Service proxy). The node is up once kubeadm init returns. Its steps
// report through run.
func kubeadmInitRole(run *phases.Run, cfg *config.ClusterConfiguration, binDir, kubeadmConfig string) labRole {
	node := lab.KubeadmNode{Dir: filepath.Join(cfg.Paths.KubeconfigDir, "lab"), Kubeadm: filepath.Join(binDir, "kubeadm"), Name: cfg.Node.Name, Address: cfg.Node.AdvertiseAddress}
	exited := make(chan error, 1)
	log := filepath.Join(node.Dir, "kubeadm-init.log")
	// The configuration names the patches: kubeadm refuses --patches next to --config.
	args := []string{"init", "--config", kubeadmConfig, "--skip-phases", "addon/kube-proxy"}
	return labRole{
		setup:    node.Isolate,
		kubelet:  startKubeadm(node, binDir, log, args, exited),
		workflow: runKubeadm(run, kubeadmExit("kubeadm-init", log, exited)),
		watch:    kubeadmView(cfg),
		done:     "control plane is up (kubeadm init): kubectl --kubeconfig " + filepath.Join(node.Dir, "overlay", "etc", "kubernetes", "admin.conf") + " get pods -n kube-system",
	}
}

// kubeadmExit is the phase that waits for kubeadm, started by
// startKubeadm, to exit, and fails with its log's tail if it failed.
func kubeadmExit(name, log string, exited <-chan error) phases.Phase[*phases.Run] {
	return phases.Phase[*phases.Run]{
		Name:  name,
		Short: "Wait for the real kubeadm to finish",
		Run: func(ctx context.Context, s *phases.Run) error {
			var err error
			select {
			case err = <-exited:
			case <-ctx.Done():
				return ctx.Err()
			}
			if err != nil {
				return fmt.Errorf("kubeadm: %w:\n%s", err, lastLines(readOrEmpty(log), 20))
			}
			s.Report.Stagef(stageKubeadmExited, "kubeadm succeeded (log: %s)", log)
			return nil
		},
	}
}

// runKubeadm is a kubeadm role's workflow: steps that only wait and
// report, in run.
func runKubeadm(run *phases.Run, steps ...phases.Phase[*phases.Run]) func(context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		return phases.Runner[*phases.Run]{Phases: steps}.Run(ctx, run, nil)
	}
}

// kubeadmView is cfg as kubeadm lays the node out: its certificates and
// manifests at kubeadm's fixed paths, for lab up's watch of the control
// plane.
func kubeadmView(cfg *config.ClusterConfiguration) *config.ClusterConfiguration {
	view := *cfg
	view.Certificates.Dir = filepath.Join(lab.KubeadmConfigDir, "pki")
	view.Paths.ManifestsDir = filepath.Join(lab.KubeadmConfigDir, "manifests")
	return &view
}

// startKubeadm is a role's kubelet step for kubeadm: it writes the node's
// patches and starts kubeadm with args (and the flags every lab node
// needs) in the background,
// logging to log and sending its exit to exited, and returns the
// kubelet's flags once kubeadm has written the kubelet's files.
func startKubeadm(node lab.KubeadmNode, binDir, log string, args []string, exited chan<- error) func(context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		if err := node.WritePatches(); err != nil {
			return nil, err
		}
		out, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return nil, err
		}
		args = append(args, "--ignore-preflight-errors", strings.Join(kubeadmIgnored, ","), "-v", "1")
		cmd := exec.CommandContext(ctx, node.Kubeadm, args...)
		cmd.Stdout, cmd.Stderr = out, out
		// kubeadm finds the kubelet on the PATH for its version check.
		cmd.Env = append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"))
		if err := cmd.Start(); err != nil {
			_ = out.Close()
			return nil, fmt.Errorf("start kubeadm %s: %w", args[0], err)
		}
		waited := make(chan error, 1)
		go func() { err := cmd.Wait(); _ = out.Close(); waited <- err; exited <- err }()
		return node.KubeletArgs(ctx, cmd, log, waited)
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
