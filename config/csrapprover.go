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
// csrApprover.image, tagged with KubebootVersion. No public registry serves
// it: an image built from the kubeboot binary must be loaded into the
// node's container runtime under this name.
const DefaultCSRApproverRepository = "kubeboot.io/kubeboot"

// KubebootVersion is the running kubeboot's release, which tags the default
// csrApprover.image, so that the approver runs the kubeboot that rendered
// its manifest. cmd/kubeboot/app sets it from the version stamped into the
// binary; it stays "dev" in tests and unstamped builds.
var KubebootVersion = "dev"

// imageTag is what the registries accept as a tag.
var imageTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// DefaultCSRApproverImage is the default csrApprover.image:
// kubeboot.io/kubeboot:<KubebootVersion>, where a version that is no valid
// tag (a '+' becomes '-') gives "dev".
func DefaultCSRApproverImage() string {
	tag := strings.ReplaceAll(KubebootVersion, "+", "-")
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

func setCSRApproverDefaults(c *ClusterConfiguration) {
	if c.CSRApprover.Enabled == nil {
		on := On(c.Security.VerifyKubeletServingCerts)
		c.CSRApprover.Enabled = &on
	}
	setString(&c.CSRApprover.Image, DefaultCSRApproverImage())
}

func validateCSRApprover(p *field.Path, a CSRApprover) field.ErrorList {
	return validateTaggedImage(p.Child("image"), a.Image, DefaultCSRApproverImage())
}
