package phases

import "slices"

// Images lists the container images this node's static pods run, as
// rendered and patched, in start order and each once: what the node's
// runtime must hold (or pull) before the kubelet can start them.
func Images(s *State) ([]string, error) {
	manifests, err := RenderPods(s)
	if err != nil {
		return nil, err
	}
	var images []string
	for _, m := range manifests {
		for _, c := range slices.Concat(m.Pod.Spec.InitContainers, m.Pod.Spec.Containers) {
			if !slices.Contains(images, c.Image) {
				images = append(images, c.Image)
			}
		}
	}
	return images, nil
}
