package config

import (
	"regexp"
	"strings"

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
	// Image is a kubeboot image: the approver is `kubeboot csr-approver`.
	Image string `json:"image,omitempty"`
}

// DefaultCSRApproverRepository is the repository of the default
// csrApprover.image, tagged with the running kubeboot's release
// (Host.KubebootVersion). No public registry serves
// it: an image built from the kubeboot binary must be loaded into the
// node's container runtime under this name.
const DefaultCSRApproverRepository = "kubeboot.io/kubeboot"

// imageTag is what the registries accept as a tag.
var imageTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// DefaultCSRApproverImage is the default csrApprover.image of a kubeboot of
// version: kubeboot.io/kubeboot:<version>, where a version that is no valid
// tag (a '+' becomes '-'), or none, gives "dev".
func DefaultCSRApproverImage(version string) string {
	tag := strings.ReplaceAll(version, "+", "-")
	if !imageTag.MatchString(tag) {
		tag = "dev"
	}
	return DefaultCSRApproverRepository + ":" + tag
}

// CSRApproverEnabled says whether this node runs the approver.
func (c *ClusterConfiguration) CSRApproverEnabled() bool {
	if c.CSRApprover.Enabled != nil {
		return *c.CSRApprover.Enabled
	}
	return On(c.Security.VerifyKubeletServingCerts)
}

func setCSRApproverDefaults(c *ClusterConfiguration, version string) {
	if c.CSRApprover.Enabled == nil {
		on := On(c.Security.VerifyKubeletServingCerts)
		c.CSRApprover.Enabled = &on
	}
	setString(&c.CSRApprover.Image, DefaultCSRApproverImage(version))
}

func validateCSRApprover(p *field.Path, a CSRApprover) field.ErrorList {
	return validateTaggedImage(p.Child("image"), a.Image, DefaultCSRApproverImage(""))
}
