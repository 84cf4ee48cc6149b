package phases

import (
	"context"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/templates"
)

// The RBAC names bootstrap-admin manages. They are kubeadm's, so admin.conf
// and runbooks behave as on a kubeadm node.
const (
	clusterAdminsGroup   = pki.AdminsGroup
	kubeletClientUser    = pki.KubeletClientUser
	kubeletAPIAdminRole  = "system:kubelet-api-admin"
	kubeletClientBinding = "kubeboot:apiserver-kubelet-client"
)

// BootstrapAdmin grants admin.conf's group cluster-admin, so admin.conf works
// without system:masters, and lets the API server's kubelet client use the
// kubelet API. It runs as a visible phase with super-admin.conf.
var BootstrapAdmin = workflow.Phase[*Node]{
	Name:     "bootstrap-admin",
	Short:    "Grant admin.conf and the API server's kubelet client their roles",
	LiveOnly: true,
	Run:      runBootstrapAdmin,
}

func runBootstrapAdmin(ctx context.Context, s *Node) error {
	client, err := APIClient(s)
	if err != nil {
		return err
	}
	return applyObjects(ctx, s, client, templates.Objects{ClusterRoleBindings: adminBindings()})
}

func adminBindings() []*rbacv1.ClusterRoleBinding {
	binding := func(name, role, kind, subject string) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: kind, Name: subject}},
		}
	}
	return []*rbacv1.ClusterRoleBinding{
		binding(clusterAdminsGroup, "cluster-admin", rbacv1.GroupKind, clusterAdminsGroup),
		binding(kubeletClientBinding, kubeletAPIAdminRole, rbacv1.UserKind, kubeletClientUser),
	}
}
