package phases

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/cri"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/templates"
)

// ResetPodNetwork removes, after the kubelet has stopped, what kubeboot's
// pod network left on the node: its interfaces (templates.FlannelLinks),
// the pod addresses handed out (templates.FlannelIPAMDir), flanneld's
// subnet file and the CNI configuration. A node joined again may get
// another pod range, and a bridge left on the old one refuses the new
// pods (flannel's plugin: "cni0 already has an IP address different from
// ...") or gives them addresses no other node routes to. It does so only
// when the CNI configuration is the one kubeboot's flannel writes
// (templates.FlannelCNIConfig): otherwise the pod network is someone
// else's and what it left is said to be left. Pods still running on the
// node, which the container runtime at runtimeEndpoint reports, keep it
// all: their interfaces hang on the bridge, and a pod the kubelet adopts
// when the node joins again would lose its network; reset says how to
// remove them first. It says which interfaces it deleted and returns the
// paths it removed and what it left; a dry run removes nothing, and a run
// on another machine's files (Offline) deletes no interface of this one.
func ResetPodNetwork(ctx context.Context, s *workflow.Run, runtimeEndpoint string) (removed, left []string, err error) {
	conf := templates.FlannelCNIConfPath
	data, err := s.Files.ReadFile(conf)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, []string{"/etc/cni/net.d and /var/lib/cni: no pod network of kubeboot's is configured on this node (no " + conf + "); the CNI plugin's own state is its own"}, nil
	case err != nil:
		return nil, nil, fmt.Errorf("read %s: %w", conf, err)
	case string(data) != templates.FlannelCNIConfig:
		return nil, []string{conf + ", cni0, flannel.1 and /var/lib/cni: the CNI configuration is not the one kubeboot's flannel writes, so the pod network is not kubeboot's. " +
			"Before this node joins again under another pod range, remove its bridge and address records (flannel: `ip link delete cni0; ip link delete flannel.1; rm -rf " + templates.FlannelIPAMDir + "`)"}, nil
	}
	if pods, err := runningPods(ctx, s, runtimeEndpoint); err != nil || len(pods) > 0 {
		why := fmt.Sprintf("%d pods still run on it (%s)", len(pods), strings.Join(pods[:min(len(pods), 3)], ", "))
		if err != nil {
			why = "whether pods still run on it cannot be told (" + err.Error() + ")"
		}
		return nil, []string{"kubeboot's pod network (" + strings.Join(templates.FlannelLinks(), ", ") + ", " + templates.FlannelIPAMDir + ", " + conf + "): " + why +
			". Once they are gone (`crictl rmp --all --force`), run reset again, which then removes the pod network: the node must lose it before it joins again under another pod range"}, nil
	}
	for _, name := range templates.FlannelLinks() {
		if s.Options.Offline {
			// The files are another machine's; the interfaces are this one's.
			left = append(left, "the network interface "+name+" of the machine whose files --root names: `ip link delete "+name+"` there removes it")
			continue
		}
		if s.Options.DryRun {
			s.Report.Infof("would delete the network interface %s, if there is one", name)
			continue
		}
		deleted, err := s.System.DeleteLink(name)
		if err != nil {
			return removed, left, err
		}
		if deleted {
			s.Report.Infof("deleted the network interface %s", name)
		}
	}
	for _, path := range []string{templates.FlannelIPAMDir, templates.FlannelSubnetFile, conf} {
		if _, err := os.Lstat(s.Files.HostPath(path)); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := s.Files.RemoveAll(path); err != nil {
			return removed, left, err
		}
		removed = append(removed, path)
		// A dry run's writer has said "would remove" already.
		if !s.Options.DryRun {
			s.Report.Infof("removed %s", path)
		}
	}
	return removed, left, nil
}

// RemovePods removes, once the kubelet has stopped, every pod the
// container runtime at endpoint holds, with its containers, as kubeadm's
// reset does: left running, they would hold the node's pod network, and a
// kubelet that joins the node again would adopt them. A runtime whose
// socket is missing runs none. It returns what it left: nothing, or on a
// dry run or another machine's files (Offline) the pods.
func RemovePods(ctx context.Context, s *workflow.Run, endpoint string) ([]string, error) {
	if s.Options.Offline || s.Options.DryRun {
		return []string{"the container runtime's pods: a dry run, or another machine's files, removes none"}, nil
	}
	removed, err := withRuntime(s, endpoint, func(c *cri.Client) ([]string, error) { return c.RemovePods(ctx) })
	if len(removed) > 0 {
		s.Report.Infof("removed the container runtime's pods (%d): %s", len(removed), strings.Join(removed, ", "))
	}
	return nil, err
}

// runningPods are the pods the runtime at endpoint runs; none when its
// socket is missing (nothing runs there), or on a dry run or another
// machine's files, where RemovePods removes none either.
func runningPods(ctx context.Context, s *workflow.Run, endpoint string) ([]string, error) {
	if s.Options.Offline || s.Options.DryRun {
		return nil, nil
	}
	return withRuntime(s, endpoint, func(c *cri.Client) ([]string, error) { return c.RunningPods(ctx) })
}

// withRuntime calls pods with a client of the runtime at endpoint and
// returns the pods it returns; a runtime whose socket is missing runs
// none.
func withRuntime(s *workflow.Run, endpoint string, pods func(*cri.Client) ([]string, error)) ([]string, error) {
	runtime, err := cri.Dial(endpoint, s.Files.HostPath)
	if errors.Is(err, cri.ErrNoRuntime) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = runtime.Close() }()
	return pods(runtime)
}

// CheckPodNetwork refuses to add flannel to a running cluster that has
// another pod network: upgrade apply's preflight. flannel became the
// default pod network (addons.cni.provider) after clusters had been made
// with their own; upgrading one of those with a configuration that does
// not say none would lay flannel over it. Such a cluster has no flannel
// DaemonSet and Ready nodes, which only a pod network makes Ready.
func CheckPodNetwork(ctx context.Context, s *Node) error {
	if s.Config.Addons.CNI.Provider != config.CNIFlannel {
		return nil
	}
	client, err := APIClient(s)
	if err != nil {
		return err
	}
	_, err = client.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, templates.FlannelName, metav1.GetOptions{})
	if err == nil || !apierrors.IsNotFound(err) {
		return err
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list the nodes: %w", err)
	}
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return &exit.UsageError{Msg: fmt.Sprintf("addons.cni.provider is flannel (its default), but this cluster runs another pod network: "+
					"it has no DaemonSet kube-system/%s and Node %s is Ready. Set addons.cni.provider: none in the configuration to keep yours, "+
					"or remove yours first to move to flannel", templates.FlannelName, n.Name)}
			}
		}
	}
	return nil
}
