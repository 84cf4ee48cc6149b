package templates

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/config"
)

// The objects of the kube-proxy addon, with kubeadm's names and keys: a
// stock `kubeadm join` reads the ConfigMap, with the Role that lets its
// bootstrap token do so.
const (
	// KubeProxyName names the ServiceAccount, the ConfigMap, the Role and
	// RoleBinding that let joining nodes read it, and the DaemonSet.
	KubeProxyName = "kube-proxy"
	// KubeProxyBinding binds KubeProxyClusterRole to kube-proxy's
	// ServiceAccount.
	KubeProxyBinding = "kubeadm:node-proxier"
	// KubeProxyClusterRole is the built-in ClusterRole of a Service proxy.
	KubeProxyClusterRole = "system:node-proxier"
	// KubeProxyConfigKey is the ConfigMap key holding the
	// KubeProxyConfiguration.
	KubeProxyConfigKey = "config.conf"
	// KubeProxyKubeconfigKey is the ConfigMap key holding the kubeconfig
	// kube-proxy reaches the API server with.
	KubeProxyKubeconfigKey = "kubeconfig.conf"
	// KubeProxyConfigDir is where the ConfigMap is mounted in the pod.
	KubeProxyConfigDir = "/var/lib/kube-proxy"
)

// serviceAccountDir is where the kubelet mounts a pod's service account
// token and the cluster CA.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// The host paths only iptables mode needs.
const (
	xtablesLockPath = "/run/xtables.lock"
	libModulesPath  = "/lib/modules"
)

// KubeProxyObjects are the objects of the kube-proxy addon: its
// ServiceAccount bound to the built-in system:node-proxier, the ConfigMap
// with its configuration and kubeconfig, the Role that lets joining nodes'
// bootstrap tokens read that ConfigMap, and the DaemonSet. c must be
// defaulted and valid. The objects are built whether or not the addon is
// disabled: leaving it out is the caller's decision.
func KubeProxyObjects(c *config.ClusterConfiguration) (Objects, error) {
	p := c.Addons.KubeProxy
	if p.Image == "" || p.Mode == "" {
		return Objects{}, errors.New("build kube-proxy objects: addons.kubeProxy is not defaulted")
	}
	proxyConfig, err := kubeProxyConfiguration(c)
	if err != nil {
		return Objects{}, err
	}
	kubeconfig, err := kubeProxyKubeconfig(c.ControlPlaneURL())
	if err != nil {
		return Objects{}, err
	}
	ns := metav1.NamespaceSystem
	cm := configMapData(ns, KubeProxyName, map[string]string{
		KubeProxyConfigKey:     string(proxyConfig),
		KubeProxyKubeconfigKey: string(kubeconfig),
	})
	cm.Labels = map[string]string{"app": KubeProxyName}
	return Objects{
		ServiceAccounts: []*corev1.ServiceAccount{serviceAccount(KubeProxyName)},
		ConfigMaps:      []*corev1.ConfigMap{cm},
		Roles:           []*rbacv1.Role{getConfigMapRole(ns, KubeProxyName, KubeProxyName)},
		RoleBindings:    []*rbacv1.RoleBinding{roleBinding(ns, KubeProxyName, group(bootstraptoken.NodeGroup))},
		ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{
			clusterRoleBinding(KubeProxyBinding, KubeProxyClusterRole, serviceAccountSubject(KubeProxyName)),
		},
		DaemonSets: []*appsv1.DaemonSet{kubeProxyDaemonSet(p.Image, p.Mode == config.ProxyModeIPTables)},
	}, nil
}

// kubeProxyConfig holds the KubeProxyConfiguration fields kubeboot sets;
// kube-proxy defaults the others.
type kubeProxyConfig struct {
	APIVersion       string                 `json:"apiVersion"`
	Kind             string                 `json:"kind"`
	BindAddress      string                 `json:"bindAddress"`
	ClientConnection kubeProxyClientConnect `json:"clientConnection"`
	ClusterCIDR      string                 `json:"clusterCIDR,omitempty"`
	Mode             string                 `json:"mode"`
}

type kubeProxyClientConnect struct {
	Kubeconfig string `json:"kubeconfig"`
}

// kubeProxyConfiguration renders the ConfigMap's KubeProxyConfigKey:
// addons.kubeProxy.mode, the pod subnets as the cluster CIDR (so that
// kube-proxy tells traffic from pods from traffic from outside), the
// wildcard address of the first service family, the kubeconfig mounted
// beside it, then addons.kubeProxy.extraConfig applied as a JSON merge
// patch. The output is YAML with sorted keys.
func kubeProxyConfiguration(c *config.ClusterConfiguration) ([]byte, error) {
	bind := "0.0.0.0"
	if subnets := c.ServiceSubnets(); len(subnets) > 0 && subnets[0].IP.To4() == nil {
		bind = "::"
	}
	kc := kubeProxyConfig{
		APIVersion:       "kubeproxy.config.k8s.io/v1alpha1",
		Kind:             "KubeProxyConfiguration",
		BindAddress:      bind,
		ClientConnection: kubeProxyClientConnect{Kubeconfig: path.Join(KubeProxyConfigDir, KubeProxyKubeconfigKey)},
		ClusterCIDR:      cidrs(c.Networking.PodSubnet),
		Mode:             c.Addons.KubeProxy.Mode,
	}
	data, err := json.Marshal(kc)
	if err != nil {
		return nil, fmt.Errorf("encode kube-proxy configuration: %w", err)
	}
	if extra := c.Addons.KubeProxy.ExtraConfig; len(extra) > 0 {
		patch, err := json.Marshal(extra)
		if err != nil {
			return nil, fmt.Errorf("encode addons.kubeProxy.extraConfig: %w", err)
		}
		if data, err = jsonpatch.MergePatch(data, patch); err != nil {
			return nil, fmt.Errorf("apply addons.kubeProxy.extraConfig: %w", err)
		}
	}
	out, err := yaml.JSONToYAML(data)
	if err != nil {
		return nil, fmt.Errorf("encode kube-proxy configuration: %w", err)
	}
	return out, nil
}

// kubeProxyKubeconfig authenticates with the pod's service account token,
// which the kubelet rotates in the file, and trusts the CA the kubelet
// mounts beside it.
func kubeProxyKubeconfig(server string) ([]byte, error) {
	const name = "default"
	c := clientcmdapi.NewConfig()
	c.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: path.Join(serviceAccountDir, "ca.crt")}
	c.AuthInfos[name] = &clientcmdapi.AuthInfo{TokenFile: path.Join(serviceAccountDir, "token")}
	c.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: metav1.NamespaceDefault}
	c.CurrentContext = name
	data, err := clientcmd.Write(*c)
	if err != nil {
		return nil, fmt.Errorf("render the kube-proxy kubeconfig: %w", err)
	}
	return data, nil
}

// kubeProxyDaemonSet runs kube-proxy on every node, whatever its taints,
// in the host's network namespace, which it programs. Only iptables mode
// mounts the xtables lock, which it shares with the host's iptables users,
// and the host's kernel modules, which it may load; nftables mode needs
// neither, and a host without /lib/modules could not start the pod.
func kubeProxyDaemonSet(image string, iptables bool) *appsv1.DaemonSet {
	mounts := []corev1.VolumeMount{{Name: KubeProxyName, MountPath: KubeProxyConfigDir}}
	volumes := []corev1.Volume{{
		Name: KubeProxyName,
		VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: KubeProxyName},
		}},
	}}
	if iptables {
		mounts = append(mounts,
			corev1.VolumeMount{Name: "xtables-lock", MountPath: xtablesLockPath},
			corev1.VolumeMount{Name: "lib-modules", MountPath: libModulesPath, ReadOnly: true},
		)
		volumes = append(volumes,
			corev1.Volume{Name: "xtables-lock", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: xtablesLockPath, Type: ptrTo(corev1.HostPathFileOrCreate),
			}}},
			corev1.Volume{Name: "lib-modules", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: libModulesPath,
			}}},
		)
	}
	return &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Name: KubeProxyName, Namespace: metav1.NamespaceSystem, Labels: appLabels(kubeProxyApp)},
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: appLabels(kubeProxyApp)},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: appLabels(kubeProxyApp)},
				Spec: corev1.PodSpec{
					PriorityClassName: systemNodeCritical,
					Containers: []corev1.Container{{
						Name:            KubeProxyName,
						Image:           image,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Command: []string{
							"/usr/local/bin/kube-proxy",
							"--config=" + path.Join(KubeProxyConfigDir, KubeProxyConfigKey),
							"--hostname-override=$(NODE_NAME)",
						},
						SecurityContext: &corev1.SecurityContext{Privileged: ptrTo(true)},
						Env: []corev1.EnvVar{{
							Name: "NODE_NAME",
							ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
								APIVersion: "v1", FieldPath: "spec.nodeName",
							}},
						}},
						VolumeMounts: mounts,
					}},
					HostNetwork:        true,
					ServiceAccountName: KubeProxyName,
					Volumes:            volumes,
					Tolerations:        []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					NodeSelector:       linuxOnly(),
				},
			},
		},
	}
}
