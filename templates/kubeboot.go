package templates

import (
	corev1 "k8s.io/api/core/v1"
)

// Kubeboot is the node's kubeboot binary, which kubeboot's own static pods
// (the CSR approver, the scheduled snapshots) run: mounted read-only at
// its path on the node into an image that needs nothing of its own, the
// pause image by default. So no image of kubeboot's exists: the package
// that installs kubeboot on the node also provides what its pods run.
type Kubeboot struct {
	// Binary is the binary's absolute path on the node, like
	// /usr/bin/kubeboot; it must be statically linked, since the image
	// holds no libc (preflight checks it).
	Binary string
	// Version is its release. The pods carry it in an annotation
	// (AnnotationKubebootVersion), so that the manifests a new release
	// renders differ and the kubelet restarts the pods on the new binary.
	Version string
}

// AnnotationKubebootVersion carries the release of the kubeboot that
// rendered one of kubeboot's own pods, and that the pod runs.
const AnnotationKubebootVersion = "kubeboot.io/version"

// kubebootSpec fills what every pod of kubeboot's own shares: the binary
// of kb, mounted read-only at its path and run as root (its files are
// root's), and kb's release as an annotation.
func kubebootSpec(s spec, kb Kubeboot) spec {
	s.binary = kb.Binary
	s.asRoot = true
	s.annotations = map[string]string{AnnotationKubebootVersion: kb.Version}
	s.mounts = append([]hostMount{{name: "kubeboot", path: kb.Binary, readOnly: true, pathType: corev1.HostPathFile}}, s.mounts...)
	return s
}
