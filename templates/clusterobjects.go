package templates

import (
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/csrapprover"
)

// The cluster objects that make the control plane joinable, with kubeadm's
// names and shapes, so that a stock `kubeadm join` finds what it reads.
// Every object is built with exactly the fields the API server stores as
// they are (TypeMeta set, no empty fields that defaulting would fill, RBAC
// subjects with their apiGroup), so that server-side applying it again
// changes nothing.

// The ConfigMaps and their keys.
const (
	KubeadmConfigName = "kubeadm-config"
	KubeadmConfigKey  = "ClusterConfiguration"
	KubeletConfigName = "kubelet-config"
	KubeletConfigKey  = "kubelet"
	// KubebootConfigName is kubeboot's own: its shared configuration
	// (config.ClusterConfiguration.Shared), which only administrators
	// read.
	KubebootConfigName   = "kubeboot-config"
	KubebootConfigKey    = "ClusterConfiguration"
	ClusterInfoName      = "cluster-info"
	ClusterInfoKey       = "kubeconfig"
	ClusterInfoNamespace = metav1.NamespacePublic
)

// The RBAC names, kubeadm's.
const (
	RoleNodesKubeadmConfig          = "kubeadm:nodes-kubeadm-config"
	RoleKubeletConfig               = "kubeadm:kubelet-config"
	BindingKubeletBootstrap         = "kubeadm:kubelet-bootstrap"
	BindingNodeAutoapproveBootstrap = "kubeadm:node-autoapprove-bootstrap"
	BindingNodeAutoapproveRotation  = "kubeadm:node-autoapprove-certificate-rotation"
	RoleGetNodes                    = "kubeadm:get-nodes"
	RoleClusterInfo                 = "kubeadm:bootstrap-signer-clusterinfo"
)

// The subjects of the RBAC of node join.
const (
	// NodesGroup holds every kubelet once it has its client certificate.
	NodesGroup = "system:nodes"
	// AnonymousUser is who an unauthenticated request is.
	AnonymousUser = "system:anonymous"
)

// ClusterInfoPath is the URL path of the cluster-info ConfigMap, the one
// resource an anonymous client may read.
const ClusterInfoPath = "/api/v1/namespaces/" + ClusterInfoNamespace + "/configmaps/" + ClusterInfoName

// Objects are API objects to apply, in the order of the fields: service
// accounts, config maps, roles, bindings (each after the role it names),
// services, then workloads, so that a pod finds its service account and
// its configuration when it starts.
type Objects struct {
	// ServiceAccounts are the identities of the addons' pods.
	ServiceAccounts []*corev1.ServiceAccount
	// ConfigMaps hold data nodes and pods read.
	ConfigMaps []*corev1.ConfigMap
	// Roles are namespaced roles.
	Roles []*rbacv1.Role
	// RoleBindings bind Roles.
	RoleBindings []*rbacv1.RoleBinding
	// ClusterRoles are cluster-wide roles.
	ClusterRoles []*rbacv1.ClusterRole
	// ClusterRoleBindings bind ClusterRoles, kubeboot's or built-in.
	ClusterRoleBindings []*rbacv1.ClusterRoleBinding
	// Services give the addons' pods a stable address.
	Services []*corev1.Service
	// Deployments run replicated addon pods.
	Deployments []*appsv1.Deployment
	// DaemonSets run an addon pod on every node.
	DaemonSets []*appsv1.DaemonSet
}

// KubernetesVersionAnnotation names, on kube-system/kubelet-config, the
// release whose configuration it holds (kubeadm-config names it in its
// ClusterConfiguration): what init or the last `upgrade apply` uploaded,
// and what `upgrade node` gives the kubelets.
const KubernetesVersionAnnotation = "kubeboot.io/kubernetes-version"

// UploadConfigObjects are the objects of the upload-config phase:
// kubeadm-config holding clusterConfig (see KubeadmClusterConfiguration),
// kubelet-config holding kubeletConfig, the KubeletConfiguration of
// release version, and the roles that let joining nodes (their bootstrap
// tokens) and joined nodes read each of the two; and kubeboot-config
// holding shared, kubeboot's own configuration without its secrets, which
// no role opens to anyone but administrators.
func UploadConfigObjects(version string, clusterConfig, kubeletConfig, shared []byte) Objects {
	readers := []rbacv1.Subject{group(bootstraptoken.NodeGroup), group(csrapprover.BoundGroup), group(NodesGroup)}
	kubelet := systemConfigMap(KubeletConfigName, KubeletConfigKey, kubeletConfig)
	kubelet.Annotations = map[string]string{KubernetesVersionAnnotation: version}
	return Objects{
		ConfigMaps: []*corev1.ConfigMap{
			systemConfigMap(KubeadmConfigName, KubeadmConfigKey, clusterConfig),
			kubelet,
			systemConfigMap(KubebootConfigName, KubebootConfigKey, shared),
		},
		Roles: []*rbacv1.Role{
			getConfigMapRole(metav1.NamespaceSystem, RoleNodesKubeadmConfig, KubeadmConfigName),
			getConfigMapRole(metav1.NamespaceSystem, RoleKubeletConfig, KubeletConfigName),
		},
		RoleBindings: []*rbacv1.RoleBinding{
			roleBinding(metav1.NamespaceSystem, RoleNodesKubeadmConfig, readers...),
			roleBinding(metav1.NamespaceSystem, RoleKubeletConfig, readers...),
		},
	}
}

// BootstrapTokenRBAC are the grants of node join, as kubeadm makes them: a
// bootstrap token of NodeGroup may post a node client CSR, which the
// controller-manager then approves; a node may renew its client
// certificate; and the token may get Nodes, so that a join can check its
// node name is free. A node-bound token (csrapprover.BoundGroup) may do
// as much but for the controller-manager's approval: kubeboot's approver
// decides its CSR.
func BootstrapTokenRBAC() Objects {
	return Objects{
		ClusterRoles: []*rbacv1.ClusterRole{{
			TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: RoleGetNodes},
			Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"nodes"}}},
		}},
		ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{
			clusterRoleBinding(BindingKubeletBootstrap, "system:node-bootstrapper", group(bootstraptoken.NodeGroup), group(csrapprover.BoundGroup)),
			clusterRoleBinding(BindingNodeAutoapproveBootstrap, "system:certificates.k8s.io:certificatesigningrequests:nodeclient", group(bootstraptoken.NodeGroup)),
			clusterRoleBinding(BindingNodeAutoapproveRotation, "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", group(NodesGroup)),
			clusterRoleBinding(RoleGetNodes, RoleGetNodes, group(bootstraptoken.NodeGroup), group(csrapprover.BoundGroup)),
		},
	}
}

// ClusterInfoObjects are the objects of the cluster-info phase: the
// kube-public ConfigMap holding kubeconfig (see pki.ClusterInfoKubeconfig)
// and signatures, its jws-kubeconfig-<token ID> keys, and the role that
// lets anonymous clients get it and nothing else.
func ClusterInfoObjects(kubeconfig []byte, signatures map[string]string) Objects {
	data := map[string]string{ClusterInfoKey: string(kubeconfig)}
	maps.Copy(data, signatures)
	return Objects{
		ConfigMaps:   []*corev1.ConfigMap{configMapData(ClusterInfoNamespace, ClusterInfoName, data)},
		Roles:        []*rbacv1.Role{getConfigMapRole(ClusterInfoNamespace, RoleClusterInfo, ClusterInfoName)},
		RoleBindings: []*rbacv1.RoleBinding{roleBinding(ClusterInfoNamespace, RoleClusterInfo, user(AnonymousUser))},
	}
}

// systemConfigMap is a ConfigMap of kube-system that holds one key. An
// apply of it owns that key only: other keys stay with whoever wrote them.
func systemConfigMap(name, key string, value []byte) *corev1.ConfigMap {
	return configMapData(metav1.NamespaceSystem, name, map[string]string{key: string(value)})
}

// configMapData holds the keys of data, all of them owned by the apply.
func configMapData(namespace, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Data:       data,
	}
}

// getConfigMapRole may get the one ConfigMap called configMap.
func getConfigMapRole(namespace, name, configMap string) *rbacv1.Role {
	return &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Rules: []rbacv1.PolicyRule{{
			Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{configMap},
		}},
	}
}

// roleBinding binds the Role of the same name.
func roleBinding(namespace, name string, subjects ...rbacv1.Subject) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   subjects,
	}
}

func clusterRoleBinding(name, role string, subjects ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   subjects,
	}
}

// group and user are subjects with the apiGroup the API server would
// default them to.
func group(name string) rbacv1.Subject {
	return rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: name}
}

func user(name string) rbacv1.Subject {
	return rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}
}

// serviceAccountSubject is a kube-system service account as a subject,
// which has no apiGroup: the API server defaults one for users and groups
// only, and stores a service account's as empty.
func serviceAccountSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: metav1.NamespaceSystem}
}

// serviceAccount is a service account of kube-system, where every addon's
// is.
func serviceAccount(name string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceSystem},
	}
}

// ptrTo is v's address, for the optional fields of the API types.
func ptrTo[T any](v T) *T { return &v }

// LabelControlPlane marks a control-plane node, as kubeadm does.
const LabelControlPlane = "node-role.kubernetes.io/control-plane"

// AnnotationCRISocket names a node's CRI socket, as kubeadm init annotates
// its node; kubeadm's commands on the node (upgrade plan, certs
// check-expiration) read its settings with it.
const AnnotationCRISocket = "kubeadm.alpha.kubernetes.io/cri-socket"

// ControlPlaneTaint keeps ordinary pods off a control-plane node.
var ControlPlaneTaint = corev1.Taint{Key: LabelControlPlane, Effect: corev1.TaintEffectNoSchedule}

// NodeMarks is the apply patch of the mark-control-plane phase: the
// control-plane label, the CRI socket's annotation and the Node's taints. Taints are an atomic list, so
// an apply sets all of them: the patch carries every taint the Node had
// when it was read, with the control-plane taint added or removed, and
// that read's resourceVersion, so that the API server refuses the patch
// if the taints changed in between instead of dropping the change.
type NodeMarks struct {
	// APIVersion and Kind are a Node's.
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Metadata holds the name, the resourceVersion read, the label and
	// the annotation.
	Metadata nodeMarksMeta `json:"metadata"`
	// Spec holds the taints.
	Spec nodeMarksSpec `json:"spec"`
}

type nodeMarksMeta struct {
	Name            string            `json:"name"`
	ResourceVersion string            `json:"resourceVersion"`
	Labels          map[string]string `json:"labels"`
	Annotations     map[string]string `json:"annotations"`
}

type nodeMarksSpec struct {
	// Taints is never omitted: an empty list removes the last taint.
	Taints []corev1.Taint `json:"taints"`
}

// MarkControlPlane returns the patch that marks node as a control-plane
// node, tainted or not as taint says, with its CRI socket criSocket, and
// whether node needs it: false when the label, the annotation and the
// taint are as wanted already.
func MarkControlPlane(node *corev1.Node, taint bool, criSocket string) (NodeMarks, bool) {
	isControlPlaneTaint := func(t corev1.Taint) bool { return t.MatchTaint(&ControlPlaneTaint) }
	taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), isControlPlaneTaint)
	if taint {
		taints = append(taints, ControlPlaneTaint)
	}
	if taints == nil {
		taints = []corev1.Taint{}
	}
	value, labelled := node.Labels[LabelControlPlane]
	tainted := slices.ContainsFunc(node.Spec.Taints, isControlPlaneTaint)
	needed := !labelled || value != "" || tainted != taint || node.Annotations[AnnotationCRISocket] != criSocket
	return NodeMarks{
		APIVersion: "v1",
		Kind:       "Node",
		Metadata: nodeMarksMeta{
			Name:            node.Name,
			ResourceVersion: node.ResourceVersion,
			Labels:          map[string]string{LabelControlPlane: ""},
			Annotations:     map[string]string{AnnotationCRISocket: criSocket},
		},
		Spec: nodeMarksSpec{Taints: taints},
	}, needed
}
