package phases

import (
	"slices"

	"github.com/kubeboot/kubeboot/internal/config"
)

// Images lists the container images this node runs, each once: its static
// pods' images, as rendered and patched, in start order, then those of the
// addons the configuration enables, flannel's and kube-proxy's (their
// DaemonSets run on every node) and CoreDNS's (its pods may be scheduled
// here), as kubeadm's image list does. It is what the node's runtime must hold (or pull)
// before the kubelet can start them.
func Images(s *Node) ([]string, error) {
	manifests, err := RenderPods(s)
	if err != nil {
		return nil, err
	}
	var images []string
	add := func(image string) {
		if !slices.Contains(images, image) {
			images = append(images, image)
		}
	}
	for _, m := range manifests {
		for _, c := range slices.Concat(m.Pod.Spec.InitContainers, m.Pod.Spec.Containers) {
			add(c.Image)
		}
	}
	if cni := s.Config.Addons.CNI; cni.Provider == config.CNIFlannel {
		add(cni.PluginImage)
		add(cni.Image)
	}
	if addons := s.Config.Addons; !addons.KubeProxy.Disabled {
		add(addons.KubeProxy.Image)
	}
	if addons := s.Config.Addons; !addons.CoreDNS.Disabled {
		add(addons.CoreDNS.Image)
	}
	return images, nil
}
