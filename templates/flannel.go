package templates

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kubeboot/kubeboot/internal/config"
)

// The objects of the flannel addon (addons.cni.provider: flannel), with
// the names Talos gives them in kube-system.
const (
	// FlannelName names the DaemonSet.
	FlannelName = "kube-flannel"
	// FlannelConfigMap holds flannel's network (FlannelNetConfKey) and the
	// CNI configuration it installs on each node (FlannelCNIConfKey).
	FlannelConfigMap = "kube-flannel-cfg"
	// FlannelNetConfKey is the ConfigMap key flanneld reads its network
	// from.
	FlannelNetConfKey = "net-conf.json"
	// FlannelCNIConfKey is the ConfigMap key of the node's CNI
	// configuration.
	FlannelCNIConfKey = "cni-conf.json"
	// flannelAccount names the ServiceAccount, the ClusterRole and its
	// binding.
	flannelAccount = "flannel"
	// flannelConfigDir is where the ConfigMap is mounted in the pod, where
	// flanneld looks for FlannelNetConfKey.
	flannelConfigDir = "/etc/kube-flannel"
	// flannelHealthPort is flanneld's /healthz and /readyz, on the node's
	// addresses (the pod runs in the host's network).
	flannelHealthPort = 8081
)

// The node's paths the flannel DaemonSet writes: the CNI plugin, its
// configuration, and the subnet file flanneld leaves for the plugin.
const (
	cniBinDir  = "/opt/cni/bin"
	cniConfDir = "/etc/cni/net.d"
	// FlannelCNIConfPath is where the DaemonSet writes FlannelCNIConfig.
	FlannelCNIConfPath = cniConfDir + "/10-flannel.conflist"
	flannelRunDir      = "/run/flannel"
	// FlannelSubnetFile is the file flanneld writes the node's pod
	// subnet to, which flannel's CNI plugin reads.
	FlannelSubnetFile = flannelRunDir + "/subnet.env"
	// FlannelIPAMDir is where the host-local IPAM plugin, to which
	// flannel's plugin hands the addresses, records the node's pod
	// addresses: its default directory under the network's name (cbr0,
	// FlannelCNIConfig's).
	FlannelIPAMDir = "/var/lib/cni/networks/cbr0"
	flanneldBinary = "/opt/bin/flanneld"
	// defaultContainerAnnotation names the container kubectl logs and
	// exec pick when none is given.
	defaultContainerAnnotation = "kubectl.kubernetes.io/default-container"
)

// flannelInstallCNI installs flannel's CNI plugin, then the CNI
// configuration, each by a rename so that neither the runtime nor a
// running plugin ever sees half a file. It runs in the plugin's image
// (Alpine's, BusyBox's in the lab), which holds the plugin as /flannel.
const flannelInstallCNI = `set -e
cp /flannel /opt/cni/bin/.flannel.tmp
mv -f /opt/cni/bin/.flannel.tmp /opt/cni/bin/flannel
cp /etc/kube-flannel/cni-conf.json /etc/cni/net.d/.10-flannel.conflist.tmp
mv -f /etc/cni/net.d/.10-flannel.conflist.tmp /etc/cni/net.d/10-flannel.conflist
`

// FlannelLinks are the network interfaces the pod network makes on a
// node: the bridge plugin's default bridge, to which flannel's plugin
// hands the pods, and flanneld's VXLAN devices (VNI 1) of each family.
func FlannelLinks() []string { return []string{"cni0", "flannel.1", "flannel-v6.1"} }

// FlannelObjects are the objects of the flannel addon: its ServiceAccount
// with the ClusterRole that lets flanneld read its pod and the nodes and
// record its VXLAN endpoint on its node, the ConfigMap with the network
// and the CNI configuration, and the DaemonSet. c must be defaulted and
// valid, with a pod subnet; the objects are built whatever the provider:
// leaving them out is the caller's decision.
func FlannelObjects(c *config.ClusterConfiguration) (Objects, error) {
	cni := c.Addons.CNI
	if cni.Image == "" || cni.PluginImage == "" {
		return Objects{}, errors.New("build flannel objects: addons.cni is not defaulted")
	}
	netConf, err := flannelNetConf(c)
	if err != nil {
		return Objects{}, err
	}
	apiServer, err := apiServerEnv(c)
	if err != nil {
		return Objects{}, fmt.Errorf("build flannel objects: %w", err)
	}
	ns := metav1.NamespaceSystem
	cm := configMapData(ns, FlannelConfigMap, map[string]string{
		FlannelNetConfKey: string(netConf),
		FlannelCNIConfKey: FlannelCNIConfig,
	})
	cm.Labels = appLabels(flannelAccount)
	nftables := c.Addons.KubeProxy.Disabled || c.Addons.KubeProxy.Mode == config.ProxyModeNftables
	return Objects{
		ServiceAccounts: []*corev1.ServiceAccount{serviceAccount(flannelAccount)},
		ConfigMaps:      []*corev1.ConfigMap{cm},
		ClusterRoles: []*rbacv1.ClusterRole{{
			TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: flannelAccount},
			Rules: []rbacv1.PolicyRule{
				{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}},
				{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"nodes"}},
				{Verbs: []string{"patch"}, APIGroups: []string{""}, Resources: []string{"nodes/status"}},
			},
		}},
		ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{
			clusterRoleBinding(flannelAccount, flannelAccount, serviceAccountSubject(flannelAccount)),
		},
		DaemonSets: []*appsv1.DaemonSet{flannelDaemonSet(flannelImages{
			flannel: cni.Image, plugin: cni.PluginImage, pause: config.DefaultKubebootPodImage(c.ImageRepository),
		}, !nftables, apiServer)},
	}, nil
}

// apiServerEnv points a pod's in-cluster client (client-go's, by
// KUBERNETES_SERVICE_HOST and _PORT) at the control-plane endpoint, as
// kube-proxy's kubeconfig does, rather than at the kubernetes Service,
// which only a running kube-proxy gives an address on the node: the pod
// network's pods must run before it.
func apiServerEnv(c *config.ClusterConfiguration) ([]corev1.EnvVar, error) {
	endpoint, err := url.Parse(c.ControlPlaneURL())
	if err != nil {
		return nil, err
	}
	return []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: endpoint.Hostname()}, {Name: "KUBERNETES_SERVICE_PORT", Value: endpoint.Port()}}, nil
}

// FlannelCNIConfig is the node's CNI configuration: flannel's plugin,
// which hands the pod to the bridge plugin with the node's subnet from
// the file flanneld writes, then portmap for hostPort. Spec 0.3.1, which
// every release of flannel's plugin accepts.
const FlannelCNIConfig = `{
  "name": "cbr0",
  "cniVersion": "0.3.1",
  "plugins": [
    {"type": "flannel", "delegate": {"hairpinMode": true, "isDefaultGateway": true}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`

// flannelNetwork is flanneld's net-conf.json.
type flannelNetwork struct {
	Network        string         `json:"Network,omitempty"`
	IPv6Network    string         `json:"IPv6Network,omitempty"`
	EnableIPv4     bool           `json:"EnableIPv4"`
	EnableIPv6     bool           `json:"EnableIPv6"`
	EnableNFTables bool           `json:"EnableNFTables"`
	Backend        flannelBackend `json:"Backend"`
}

type flannelBackend struct {
	Type string `json:"Type"`
}

// flannelNetConf is net-conf.json: the pod subnet of each family, VXLAN
// between the nodes, whatever subnet each sits on, and nftables for
// flannel's masquerade and forward rules when kube-proxy uses nftables
// (or does not run), iptables when kube-proxy does.
func flannelNetConf(c *config.ClusterConfiguration) ([]byte, error) {
	n := flannelNetwork{
		EnableNFTables: c.Addons.KubeProxy.Disabled || c.Addons.KubeProxy.Mode == config.ProxyModeNftables,
		Backend:        flannelBackend{Type: "vxlan"},
	}
	subnets := c.PodSubnets()
	if len(subnets) == 0 {
		return nil, errors.New("build flannel objects: flannel needs networking.podSubnet")
	}
	for _, s := range subnets {
		if s.IP.To4() != nil {
			n.Network, n.EnableIPv4 = s.String(), true
		} else {
			n.IPv6Network, n.EnableIPv6 = s.String(), true
		}
	}
	out, err := json.MarshalIndent(n, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("build flannel objects: %w", err)
	}
	return append(out, '\n'), nil
}

// flannelImages are the images of the flannel DaemonSet's containers.
type flannelImages struct {
	// flannel holds flanneld, plugin flannel's CNI plugin and a shell,
	// and pause is the pause image, which every node holds.
	flannel, plugin, pause string
}

// flannelDaemonSet runs flanneld on every node, whatever its taints, in
// the host's network namespace, with the capabilities it needs to make
// the VXLAN device, routes and rules. Only iptables mode mounts the
// xtables lock. flanneld reaches the API server with apiServer (see
// apiServerEnv).
//
// The pod installs flannel's CNI plugin into the node's /opt/cni/bin and
// the CNI configuration into /etc/cni/net.d only once flanneld has
// written the node's subnet file: the configuration is what turns the
// node Ready (the runtime reports its network ready), and a pod the
// scheduler then puts there would fail its sandbox without the subnet
// file, and wait out the kubelet's 10 to 15 s backoff. So flanneld runs
// as a sidecar (an init container that keeps running), which the kubelet
// lets the next init container, the installer, follow only once its
// startup probe, flanneld's /readyz, passes: flanneld turns ready right
// after it wrote the subnet file. One installer for both files, since
// each container the kubelet starts after another's exit costs up to a
// second more. The pod's one container is the pause image, which holds
// it while flanneld runs.
func flannelDaemonSet(images flannelImages, iptables bool, apiServer []corev1.EnvVar) *appsv1.DaemonSet {
	hostPath := func(name, path string, t corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: ptrTo(t)}}}
	}
	volumes := []corev1.Volume{
		hostPath("run", flannelRunDir, corev1.HostPathDirectoryOrCreate),
		hostPath("cni-plugin", cniBinDir, corev1.HostPathDirectoryOrCreate),
		hostPath("cni", cniConfDir, corev1.HostPathDirectoryOrCreate),
		{Name: "flannel-cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: FlannelConfigMap},
		}}},
	}
	mounts := []corev1.VolumeMount{
		{Name: "run", MountPath: flannelRunDir},
		{Name: "flannel-cfg", MountPath: flannelConfigDir, ReadOnly: true},
	}
	if iptables {
		volumes = append(volumes, hostPath("xtables-lock", xtablesLockPath, corev1.HostPathFileOrCreate))
		mounts = append(mounts, corev1.VolumeMount{Name: "xtables-lock", MountPath: xtablesLockPath})
	}
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
	}
	health := func(path string) corev1.ProbeHandler {
		return corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(flannelHealthPort), Host: "127.0.0.1"}}
	}
	flanneld := corev1.Container{
		Name:            FlannelName,
		Image:           images.flannel,
		ImagePullPolicy: corev1.PullIfNotPresent,
		RestartPolicy:   ptrTo(corev1.ContainerRestartPolicyAlways),
		Command:         []string{flanneldBinary, "--ip-masq", "--kube-subnet-mgr", fmt.Sprintf("--healthz-port=%d", flannelHealthPort)},
		Env:             append([]corev1.EnvVar{fieldEnv("NODE_NAME", "spec.nodeName"), fieldEnv("POD_NAME", "metadata.name"), fieldEnv("POD_NAMESPACE", "metadata.namespace")}, apiServer...),
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("50Mi"),
		}},
		LivenessProbe: &corev1.Probe{ProbeHandler: health("/healthz"), InitialDelaySeconds: 10, PeriodSeconds: 30},
		// flanneld's /readyz turns ready once, for good: a readiness probe
		// after the startup probe would add nothing but its period.
		StartupProbe: &corev1.Probe{ProbeHandler: health("/readyz"), PeriodSeconds: 1, FailureThreshold: 300},
		SecurityContext: &corev1.SecurityContext{
			Privileged:   ptrTo(false),
			Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN", "NET_RAW"}},
		},
		VolumeMounts: mounts,
	}
	labels := appLabels(flannelAccount)
	return &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Name: FlannelName, Namespace: metav1.NamespaceSystem, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType},
			Template: corev1.PodTemplateSpec{
				// kubectl logs and exec pick flanneld, not the pause container.
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{defaultContainerAnnotation: FlannelName}},
				Spec: corev1.PodSpec{
					PriorityClassName: systemNodeCritical,
					InitContainers: []corev1.Container{
						flanneld,
						{
							Name: "install-cni", Image: images.plugin, ImagePullPolicy: corev1.PullIfNotPresent,
							Command: []string{"sh", "-c", flannelInstallCNI},
							VolumeMounts: []corev1.VolumeMount{
								{Name: "cni-plugin", MountPath: cniBinDir},
								{Name: "cni", MountPath: cniConfDir},
								{Name: "flannel-cfg", MountPath: flannelConfigDir, ReadOnly: true},
							},
						},
					},
					Containers: []corev1.Container{{
						Name: "pause", Image: images.pause, ImagePullPolicy: corev1.PullIfNotPresent,
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU:    resource.MustParse("1m"),
							corev1.ResourceMemory: resource.MustParse("1Mi"),
						}},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptrTo(false),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
					HostNetwork:        true,
					ServiceAccountName: flannelAccount,
					Volumes:            volumes,
					Tolerations:        []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					NodeSelector:       linuxOnly(),
				},
			},
		},
	}
}
