package templates

import (
	"errors"
	"fmt"
	"net"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kubeboot/kubeboot/internal/config"
)

// The objects of the CoreDNS addon, with kubeadm's names: kubeadm's
// `upgrade plan` finds the cluster DNS by the Deployment's name and reads
// its version from the image.
const (
	// CoreDNSName names the ServiceAccount, the ConfigMap and the
	// Deployment.
	CoreDNSName = "coredns"
	// CoreDNSRole names the ClusterRole and its ClusterRoleBinding.
	CoreDNSRole = "system:coredns"
	// CoreDNSServiceName is the Service at the cluster DNS address; the
	// name predates CoreDNS and clients rely on it.
	CoreDNSServiceName = "kube-dns"
	// CoreDNSConfigKey is the ConfigMap key holding the Corefile.
	CoreDNSConfigKey = "Corefile"
)

// The label the addons select their pods by, and its values, kubeadm's.
const (
	labelK8sApp  = "k8s-app"
	coreDNSApp   = "kube-dns"
	kubeProxyApp = "kube-proxy"
)

// appLabels is a new map each time: the object's labels, its selector and
// its pod template's labels must not share one.
func appLabels(app string) map[string]string { return map[string]string{labelK8sApp: app} }

// linuxOnly is the addons' node selector: their images are Linux images.
func linuxOnly() map[string]string { return map[string]string{corev1.LabelOSStable: "linux"} }

// The CoreDNS container's ports, named so that the probes and the Service
// refer to them by name.
const (
	coreDNSPort        = 53
	coreDNSMetricsPort = 9153
	coreDNSHealthPort  = 8080
	coreDNSReadyPort   = 8181
	coreDNSConfigDir   = "/etc/coredns"
	coreDNSVolume      = "config-volume"
)

// CoreDNSObjects are the objects of the CoreDNS addon: its ServiceAccount,
// the ClusterRole that lets it watch Services and their endpoints, the
// Corefile, the Deployment and the kube-dns Service at c.ClusterDNSIP(),
// the address every kubelet gives its pods as their name server. c must
// be defaulted and valid. The objects are built whether or not the addon
// is disabled: leaving it out is the caller's decision.
func CoreDNSObjects(c *config.ClusterConfiguration) (Objects, error) {
	ips := c.ClusterDNSIPs()
	if len(ips) == 0 {
		return Objects{}, errors.New("build CoreDNS objects: no service subnet for the cluster DNS address")
	}
	if c.Addons.CoreDNS.Replicas == nil || c.Addons.CoreDNS.Image == "" {
		return Objects{}, errors.New("build CoreDNS objects: addons.coreDNS is not defaulted")
	}
	service, err := coreDNSService(ips)
	if err != nil {
		return Objects{}, err
	}
	return Objects{
		ServiceAccounts: []*corev1.ServiceAccount{serviceAccount(CoreDNSName)},
		ConfigMaps: []*corev1.ConfigMap{
			systemConfigMap(CoreDNSName, CoreDNSConfigKey, []byte(corefile(c.Networking.DNSDomain))),
		},
		ClusterRoles: []*rbacv1.ClusterRole{{
			TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: CoreDNSRole},
			Rules: []rbacv1.PolicyRule{
				{Verbs: []string{"list", "watch"}, APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}},
				{Verbs: []string{"list", "watch"}, APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}},
			},
		}},
		ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{
			clusterRoleBinding(CoreDNSRole, CoreDNSRole, serviceAccountSubject(CoreDNSName)),
		},
		Services:    []*corev1.Service{service},
		Deployments: []*appsv1.Deployment{coreDNSDeployment(c.Addons.CoreDNS.Image, *c.Addons.CoreDNS.Replicas)},
	}, nil
}

// corefile serves the cluster domain and the reverse zones from the API,
// and forwards everything else to the node's resolver. Answers in the
// cluster domain are not cached, so that a new Service resolves at once.
func corefile(domain string) string {
	return fmt.Sprintf(`.:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    kubernetes %[1]s in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    prometheus :%[2]d
    forward . /etc/resolv.conf {
        max_concurrent 1000
    }
    cache 30 {
        disable success %[1]s
        disable denial %[1]s
    }
    loop
    reload
    loadbalance
}
`, domain, coreDNSMetricsPort)
}

// coreDNSService is kube-dns at ips, one per service family. A single
// family sets clusterIP only and lets the API server fill in clusterIPs,
// ipFamilies and ipFamilyPolicy as it would for any Service.
func coreDNSService(ips []string) (*corev1.Service, error) {
	spec := corev1.ServiceSpec{
		Selector: appLabels(coreDNSApp),
		Ports: []corev1.ServicePort{
			{Name: "dns", Port: coreDNSPort, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(coreDNSPort)},
			{Name: "dns-tcp", Port: coreDNSPort, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(coreDNSPort)},
			{Name: "metrics", Port: coreDNSMetricsPort, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(coreDNSMetricsPort)},
		},
		ClusterIP: ips[0],
	}
	if len(ips) > 1 {
		spec.ClusterIPs = ips
		spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicyPreferDualStack)
		for _, ip := range ips {
			family, err := ipFamily(ip)
			if err != nil {
				return nil, err
			}
			spec.IPFamilies = append(spec.IPFamilies, family)
		}
	}
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      CoreDNSServiceName,
			Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{
				labelK8sApp:                     coreDNSApp,
				"kubernetes.io/cluster-service": "true",
				"kubernetes.io/name":            "CoreDNS",
			},
			Annotations: map[string]string{
				"prometheus.io/port":   fmt.Sprint(coreDNSMetricsPort),
				"prometheus.io/scrape": "true",
			},
		},
		Spec: spec,
	}, nil
}

func ipFamily(ip string) (corev1.IPFamily, error) {
	parsed := net.ParseIP(ip)
	switch {
	case parsed == nil:
		return "", fmt.Errorf("build service %q: cluster IP %q is no IP address", CoreDNSServiceName, ip)
	case parsed.To4() != nil:
		return corev1.IPv4Protocol, nil
	default:
		return corev1.IPv6Protocol, nil
	}
}

// coreDNSDeployment runs CoreDNS off the cluster's own DNS (dnsPolicy
// Default: the node's resolver), spread over nodes where it can be, and on
// control-plane nodes too, since before a CNI only they may be Ready.
func coreDNSDeployment(image string, replicas int32) *appsv1.Deployment {
	container := corev1.Container{
		Name:            CoreDNSName,
		Image:           image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Args:            []string{"-conf", coreDNSConfigDir + "/" + CoreDNSConfigKey},
		Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("170Mi")},
			Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("100m"),
				corev1.ResourceMemory: resource.MustParse("70Mi"),
			},
		},
		VolumeMounts: []corev1.VolumeMount{{Name: coreDNSVolume, MountPath: coreDNSConfigDir, ReadOnly: true}},
		Ports: []corev1.ContainerPort{
			{Name: "dns", ContainerPort: coreDNSPort, Protocol: corev1.ProtocolUDP},
			{Name: "dns-tcp", ContainerPort: coreDNSPort, Protocol: corev1.ProtocolTCP},
			{Name: "metrics", ContainerPort: coreDNSMetricsPort, Protocol: corev1.ProtocolTCP},
			{Name: "liveness-probe", ContainerPort: coreDNSHealthPort, Protocol: corev1.ProtocolTCP},
			{Name: "readiness-probe", ContainerPort: coreDNSReadyPort, Protocol: corev1.ProtocolTCP},
		},
		LivenessProbe: &corev1.Probe{
			ProbeHandler:        httpGet("/health", "liveness-probe"),
			InitialDelaySeconds: 60,
			TimeoutSeconds:      5,
			SuccessThreshold:    1,
			FailureThreshold:    5,
		},
		// Every 2 s, as k3s probes it, not the default 10 s: a pod that
		// answers its first probe too early (its Kubernetes plugin not yet
		// synced) turns Ready 2 s later, not 10.
		ReadinessProbe: &corev1.Probe{ProbeHandler: httpGet("/ready", "readiness-probe"), PeriodSeconds: 2},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptrTo(false),
			Capabilities: &corev1.Capabilities{
				Add:  []corev1.Capability{"NET_BIND_SERVICE"},
				Drop: []corev1.Capability{"ALL"},
			},
			ReadOnlyRootFilesystem: ptrTo(true),
		},
	}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: CoreDNSName, Namespace: metav1.NamespaceSystem, Labels: appLabels(coreDNSApp)},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptrTo(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: appLabels(coreDNSApp)},
			Strategy: appsv1.DeploymentStrategy{
				Type:          appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptrTo(intstr.FromInt32(1))},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: appLabels(coreDNSApp)},
				Spec: corev1.PodSpec{
					PriorityClassName:  "system-cluster-critical",
					ServiceAccountName: CoreDNSName,
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
							Weight: 100,
							PodAffinityTerm: corev1.PodAffinityTerm{
								LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
									Key: labelK8sApp, Operator: metav1.LabelSelectorOpIn, Values: []string{coreDNSApp},
								}}},
								TopologyKey: corev1.LabelHostname,
							},
						}},
					}},
					Tolerations: []corev1.Toleration{
						{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
						{Key: LabelControlPlane, Effect: corev1.TaintEffectNoSchedule},
					},
					NodeSelector: linuxOnly(),
					Containers:   []corev1.Container{container},
					DNSPolicy:    corev1.DNSDefault,
					Volumes: []corev1.Volume{{
						Name: coreDNSVolume,
						VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: CoreDNSName},
							Items:                []corev1.KeyToPath{{Key: CoreDNSConfigKey, Path: CoreDNSConfigKey}},
						}},
					}},
				},
			},
		},
	}
}

// httpGet probes path on the named container port.
func httpGet(path, port string) corev1.ProbeHandler {
	return corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: path, Port: intstr.FromString(port), Scheme: corev1.URISchemeHTTP,
	}}
}
