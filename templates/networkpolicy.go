package templates

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeboot/kubeboot/internal/config"
)

// The NetworkPolicy enforcer's objects, beside flannel's, which enforces
// none.
const (
	// NetworkPolicyName names the DaemonSet, its ServiceAccount, and the
	// ClusterRole and binding that let it read what it enforces.
	NetworkPolicyName = "kubeboot-network-policy"
	// NetworkPolicyCommand is the kubeboot subcommand its pods run.
	NetworkPolicyCommand = "network-policy"
)

// NetworkPolicyObjects are the objects of kubeboot's NetworkPolicy
// enforcer, which the pod network addon installs with flannel: a
// DaemonSet whose pod on each node runs that node's kubeboot binary kb
// (`kubeboot network-policy`, mounted read-only into the pause image, as
// kubeboot's static pods do) in the host's network namespace with
// NET_ADMIN, where it keeps its nftables table; and its ServiceAccount,
// allowed to read and watch pods, namespaces and network policies, and
// nothing else.
func NetworkPolicyObjects(c *config.ClusterConfiguration, kb Kubeboot) (Objects, error) {
	apiServer, err := apiServerEnv(c)
	if err != nil {
		return Objects{}, fmt.Errorf("build %s objects: %w", NetworkPolicyName, err)
	}
	read := []string{"get", "list", "watch"}
	return Objects{
		ServiceAccounts: []*corev1.ServiceAccount{serviceAccount(NetworkPolicyName)},
		ClusterRoles: []*rbacv1.ClusterRole{{
			TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: NetworkPolicyName},
			Rules: []rbacv1.PolicyRule{
				{Verbs: read, APIGroups: []string{""}, Resources: []string{"pods", "namespaces"}},
				{Verbs: read, APIGroups: []string{networkingv1.GroupName}, Resources: []string{"networkpolicies"}},
			},
		}},
		ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{
			clusterRoleBinding(NetworkPolicyName, NetworkPolicyName, serviceAccountSubject(NetworkPolicyName)),
		},
		DaemonSets: []*appsv1.DaemonSet{networkPolicyDaemonSet(config.DefaultKubebootPodImage(c.ImageRepository), kb, apiServer)},
	}, nil
}

// networkPolicyDaemonSet runs the enforcer on every node, whatever its
// taints, as root (the binary is root's) with NET_ADMIN alone.
func networkPolicyDaemonSet(image string, kb Kubeboot, apiServer []corev1.EnvVar) *appsv1.DaemonSet {
	labels := appLabels(NetworkPolicyName)
	root := int64(0)
	return &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Name: NetworkPolicyName, Namespace: metav1.NamespaceSystem, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{AnnotationKubebootVersion: kb.Version}},
				Spec: corev1.PodSpec{
					PriorityClassName: systemNodeCritical,
					Containers: []corev1.Container{{
						Name:            NetworkPolicyName,
						Image:           image,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Command:         []string{kb.Binary, NetworkPolicyCommand, "--node-name=$(NODE_NAME)"},
						Env: append([]corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.nodeName"}}}},
							apiServer...),
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU:    resource.MustParse("10m"),
							corev1.ResourceMemory: resource.MustParse("30Mi"),
						}},
						SecurityContext: &corev1.SecurityContext{
							RunAsUser: &root, RunAsGroup: &root,
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN"}},
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "kubeboot", MountPath: kb.Binary, ReadOnly: true}},
					}},
					HostNetwork:        true,
					ServiceAccountName: NetworkPolicyName,
					Volumes: []corev1.Volume{{Name: "kubeboot", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
						Path: kb.Binary, Type: ptrTo(corev1.HostPathFile),
					}}}},
					Tolerations:  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					NodeSelector: linuxOnly(),
				},
			},
		},
	}
}
