package config

import (
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// CSRApprover configures kubeboot's approver of kubelet serving
// certificates: the kubeboot-csr-approver static pod, which approves each
// kubernetes.io/kubelet-serving CSR that a node posts for its own names
// and addresses, and denies the others. Kubernetes approves none of them
// by itself, so without it a kubelet with serverTLSBootstrap never gets
// the serving certificate that security.verifyKubeletServingCerts makes
// the API server require.
type CSRApprover struct {
	// Enabled runs the approver on this control-plane node; unset means
	// security.verifyKubeletServingCerts.
	Enabled *bool `json:"enabled,omitempty"`
	// Image is the image the approver's container starts from. It runs
	// the node's own kubeboot, mounted read-only, so the image needs
	// nothing of its own (default: the pause image,
	// <imageRepository>/pause:<PauseVersion>, which every node holds).
	Image string `json:"image,omitempty"`
}

// PauseVersion tags the default image of kubeboot's own pods: the pause
// image kubeadm v1.36 pins, which a node's container runtime holds for its
// pod sandboxes. Public registries serve it (registry.k8s.io).
const PauseVersion = "3.10.2"

// DefaultKubebootPodImage is the default image of kubeboot's own static
// pods (csrApprover.image, etcd.local.scheduledSnapshots.image) under
// the image repository repo: the pause image. The pods run the node's
// kubeboot binary, mounted read-only, and need nothing from the image
// but an empty root, so no image of kubeboot's is needed: a node holds
// only what a public registry serves.
func DefaultKubebootPodImage(repo string) string {
	return repo + "/pause:" + PauseVersion
}

// CSRApproverEnabled says whether this node runs the approver.
func (c *ClusterConfiguration) CSRApproverEnabled() bool {
	if c.CSRApprover.Enabled != nil {
		return *c.CSRApprover.Enabled
	}
	return On(c.Security.VerifyKubeletServingCerts)
}

func setCSRApproverDefaults(c *ClusterConfiguration) {
	if c.CSRApprover.Enabled == nil {
		on := On(c.Security.VerifyKubeletServingCerts)
		c.CSRApprover.Enabled = &on
	}
	setString(&c.CSRApprover.Image, DefaultKubebootPodImage(c.ImageRepository))
}

func validateCSRApprover(p *field.Path, a CSRApprover) field.ErrorList {
	return validateTaggedImage(p.Child("image"), a.Image, DefaultKubebootPodImage(DefaultImageRepository))
}
