package phases

import (
	"context"

	"github.com/kubeboot/kubeboot/templates"
)

// UploadConfig stores what a joining node reads about the cluster, as
// kubeadm's upload-config does: kube-system/kubeadm-config (a kubeadm
// ClusterConfiguration equivalent to kubeboot's) and kube-system/kubelet-config
// (the cluster-wide KubeletConfiguration), each readable by bootstrap
// tokens and nodes. A re-run applies the same objects, which the API
// server leaves as they are.
var UploadConfig = Phase[*Node]{
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
	client, err := apiClient(s)
	if err != nil {
		return err
	}
	return applyObjects(ctx, s, client, templates.UploadConfigObjects(kubeadm, kubelet))
}
