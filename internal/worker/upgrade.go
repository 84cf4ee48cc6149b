package worker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"
	apiversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
)

// apiServerWait bounds the wait for the API server to answer at the start
// of a worker's upgrade.
const apiServerWait = time.Minute

// Upgrade is `kubeboot upgrade node` on a worker (see
// upgradeWorker); timeout bounds the wait for the restarted kubelet, 0
// meaning timeouts.tlsBootstrap.
func Upgrade(timeout time.Duration) workflow.Operation[*Node] {
	return workflow.Operation[*Node]{Name: "upgrade", Run: func(ctx context.Context, s *Node) error {
		return upgradeWorker(ctx, s, timeout)
	}}
}

// upgradeWorker moves a joined worker's kubelet to the cluster's release,
// once the control plane runs it, as kubeadm's `upgrade node` does on a
// worker: with the kubelet's own credential (kubelet.conf), it checks the
// skew of the kubelet binary the operator installed against the API server
// and the cluster's release (kube-system/kubeadm-config), writes the
// kubelet's configuration from the cluster's kubelet-config with this
// node's settings (the join's kubelet-config phase), and restarts
// kubelet.service (phases.UpgradeKubelet).
func upgradeWorker(ctx context.Context, s *Node, timeout time.Duration) error {
	w := s.Config
	if timeout <= 0 {
		timeout = w.Timeouts.TLSBootstrap.Duration
	}
	path := w.KubeconfigPath(config.KubeconfigKubelet)
	if _, err := s.Files.ReadFile(path); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s is missing: this worker has not joined; run `kubeboot join` first", path)
	}
	client, err := s.KubeletClient(s.Files.HostPath(path))
	if err != nil {
		return fmt.Errorf("build the kubelet's client from %s: %w", path, err)
	}
	// The join's kubelet-config phase reads with the run's client.
	s.API = client
	kubelet, err := phases.ReadKubelet(ctx, s.Run, client, w.Node.Name)
	if err != nil {
		return err
	}
	if kubelet.Systemd {
		if err := checkWorkerSkew(ctx, client, kubelet.Release); err != nil {
			return err
		}
	}
	if err := runKubeletConfig(ctx, s); err != nil {
		return err
	}
	return phases.UpgradeKubelet(ctx, s.Run, client, kubelet, w.Node.Name, w.Kubelet.ConfigFile, timeout)
}

// checkWorkerSkew refuses a kubelet binary, of release kubelet, the
// control plane cannot serve: the API server that answers and the
// cluster's release must both allow it (see phases.CheckKubeletSkew), so
// a kubelet is installed only after every control-plane node runs the
// release.
func checkWorkerSkew(ctx context.Context, client kubernetes.Interface, kubelet *version.Version) error {
	// Right after a control-plane node's upgrade, the API server behind
	// the endpoint may still be starting: its answer is waited for.
	var info *apiversion.Info
	var last error
	if err := wait.PollUntilContextTimeout(ctx, time.Second, apiServerWait, true, func(context.Context) (bool, error) {
		info, last = client.Discovery().ServerVersion()
		return last == nil, nil
	}); err != nil {
		return fmt.Errorf("read the API server's version (for %s): %w", apiServerWait, last)
	}
	server, err := version.ParseSemantic(info.GitVersion)
	if err != nil {
		return fmt.Errorf("read the API server's version %q: %w", info.GitVersion, err)
	}
	if err := phases.CheckKubeletSkew("the kubelet on the PATH", kubelet, "the API server at "+info.GitVersion, server); err != nil {
		return err
	}
	release, err := phases.ClusterVersion(ctx, client)
	if err != nil {
		return err
	}
	cluster, err := version.ParseSemantic(release)
	if err != nil {
		return fmt.Errorf("read the cluster's kubernetesVersion %q: %w", release, err)
	}
	return phases.CheckKubeletSkew("the kubelet on the PATH", kubelet, "the cluster's release in kube-system/kubeadm-config", cluster)
}
