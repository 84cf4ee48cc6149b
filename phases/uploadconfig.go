package phases

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/templates"
)

// UploadConfig stores what a joining node reads about the cluster, as
// kubeadm's upload-config does: kube-system/kubeadm-config (a kubeadm
// ClusterConfiguration equivalent to kubeboot's) and kube-system/kubelet-config
// (the cluster-wide KubeletConfiguration), each readable by bootstrap
// tokens and nodes; and kube-system/kubeboot-config, kubeboot's own
// configuration without its secrets, for the commands an administrator
// runs from any machine. A re-run applies the same objects, which the API
// server leaves as they are.
var UploadConfig = workflow.Phase[*Node]{
	Name:     "upload-config",
	Short:    "Store the cluster's kubeadm ClusterConfiguration and KubeletConfiguration in kube-system for joining nodes",
	LiveOnly: true,
	Run:      runUploadConfig,
}

func runUploadConfig(ctx context.Context, s *Node) error {
	kubeadm, err := templates.KubeadmClusterConfiguration(s.Config)
	if err != nil {
		return err
	}
	kubelet, err := ClusterKubeletConfiguration(s.Config)
	if err != nil {
		return err
	}
	shared, err := s.Config.Shared()
	if err != nil {
		return err
	}
	client, err := APIClient(s)
	if err != nil {
		return err
	}
	return applyObjects(ctx, s, client, templates.UploadConfigObjects(s.Config.KubernetesVersion, kubeadm, kubelet, shared))
}

// SharedConfig reads the configuration the cluster keeps in
// kube-system/kubeboot-config (see config.ClusterConfiguration.Shared),
// defaulted for this machine (host).
func SharedConfig(ctx context.Context, client kubernetes.Interface, host config.Host) (*config.ClusterConfiguration, error) {
	cm, err := client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, templates.KubebootConfigName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("read %s: the cluster has none: it was made by a kubeboot older than this one, or by kubeadm; "+
			"run this command on a control-plane node with its --config instead, or run `kubeboot upgrade apply` there once, which stores it", config.SharedSource)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", config.SharedSource, err)
	}
	return config.ParseShared([]byte(cm.Data[templates.KubebootConfigKey]), host)
}

// ClusterVersion is the kubernetesVersion of kube-system/kubeadm-config,
// the cluster's release as init or the last `upgrade apply` recorded it.
func ClusterVersion(ctx context.Context, client kubernetes.Interface) (string, error) {
	name := metav1.NamespaceSystem + "/" + templates.KubeadmConfigName
	cm, err := client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, templates.KubeadmConfigName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("get ConfigMap %s: %w", name, err)
	}
	for _, line := range strings.Split(cm.Data[templates.KubeadmConfigKey], "\n") {
		if v, ok := strings.CutPrefix(line, "kubernetesVersion: "); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("read ConfigMap %s: its %s names no kubernetesVersion", name, templates.KubeadmConfigKey)
}
