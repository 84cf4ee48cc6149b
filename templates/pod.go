// Package templates owns the static pod manifests of the control plane: one
// pure, deterministic corev1.Pod builder per component (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler), the user patches applied on top
// of them, and their YAML form. It also renders the files the API server
// reads beside its flags (encryption, audit, admission and authentication
// configuration). It never touches disk and never prints; the phases decide
// where the bytes go.
//
// The builders start from kubeadm v1.36's flags, pod shape and probes, so
// the manifests look like what users already know. DIFFERENCES.md lists every
// place where kubeboot deliberately does something else, and why.
package templates

import (
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/kubeboot/kubeboot/internal/config"
)

// The Kubernetes minor versions kubeboot renders manifests for, inclusive.
// Their default flags are identical; only the image tags differ.
const (
	minMinor = 34
	maxMinor = 36
)

const (
	// probePortName names the container port the probes use, so a patch
	// that moves a component to another port changes a single field.
	probePortName = "probe-port"
	// systemNodeCritical is the priority class of every control-plane pod;
	// the kubelet does not resolve priority classes for static pods, so the
	// matching priority value is set too.
	systemNodeCritical         = "system-node-critical"
	systemNodeCriticalPriority = int32(2000001000)
	// startupProbePeriod is the startup probe's period; the failure
	// threshold is derived from it and the control-plane timeout.
	startupProbePeriod = 10 * time.Second
)

// Manifest is one rendered control-plane component.
type Manifest struct {
	// Component is the static pod's name, one of config.StaticPodNames.
	Component string
	// Pod is the component's static pod.
	Pod *corev1.Pod
}

// All builds every static pod cfg runs on this node, in start order: the
// components, then kubeboot's own pods that are enabled, which run kb; m
// is the etcd member's place in its cluster. With an external etcd there
// is no etcd pod.
func All(cfg *config.ClusterConfiguration, m EtcdMembership, kb Kubeboot) ([]Manifest, error) {
	builders := map[string]func(*config.ClusterConfiguration) (*corev1.Pod, error){
		config.NameEtcd:              func(cfg *config.ClusterConfiguration) (*corev1.Pod, error) { return Etcd(cfg, m) },
		config.NameAPIServer:         APIServer,
		config.NameControllerManager: ControllerManager,
		config.NameScheduler:         Scheduler,
		config.NameCSRApprover:       func(cfg *config.ClusterConfiguration) (*corev1.Pod, error) { return CSRApprover(cfg, kb) },
		config.NameEtcdSnapshots:     func(cfg *config.ClusterConfiguration) (*corev1.Pod, error) { return EtcdSnapshots(cfg, kb) },
	}
	var manifests []Manifest
	for _, name := range config.StaticPodNames {
		if name == config.NameEtcd && cfg.Etcd.External != nil || slices.Contains(config.KubebootPods, name) && !cfg.KubebootPodEnabled(name) {
			continue
		}
		pod, err := builders[name](cfg)
		if err != nil {
			return nil, err
		}
		manifests = append(manifests, Manifest{Component: name, Pod: pod})
	}
	return manifests, nil
}

// spec is what differs between the control-plane pods; newPod adds the
// shape they all share.
type spec struct {
	name       string
	image      string
	binary     string
	subcommand []string // the words after binary, before the flags
	flags      []flag
	health     endpoint
	livez      string // liveness probe path
	readyz     string // readiness probe path
	startup    string // startup probe path
	cpu        string
	memory     string // empty: no memory request
	mounts     []hostMount
	extra      config.Component
	timeout    time.Duration // how long the startup probe tolerates failures
	// annotations are kubeadm's, which its commands read from the mirror
	// pods (see KubeadmAnnotations), or kubeboot's (AnnotationKubebootVersion).
	annotations map[string]string
	// asRoot runs the container as root whatever the image says: the
	// pause image that kubeboot's own pods start from names user 65535,
	// who could read none of the files they mount.
	asRoot bool
}

// kubeadm's annotations of its static pods: `kubeadm upgrade plan`,
// `kubeadm certs check-expiration` and `kubeadm join` read a node's API
// endpoint and its etcd member's client URLs from the mirror pods.
const (
	AnnotationAPIServerEndpoint = "kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint"
	AnnotationEtcdClientURLs    = "kubeadm.kubernetes.io/etcd.advertise-client-urls"
)

// newPod returns the static pod of s: host network, critical priority,
// RuntimeDefault seccomp, one container probed on its health endpoint.
func newPod(s spec) *corev1.Pod {
	requests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(s.cpu)}
	if s.memory != "" {
		requests[corev1.ResourceMemory] = resource.MustParse(s.memory)
	}
	volumes, volumeMounts := hostPathVolumes(s.mounts, s.extra.ExtraVolumes)
	var env []corev1.EnvVar
	for _, e := range s.extra.ExtraEnv {
		env = append(env, corev1.EnvVar{Name: e.Name, Value: e.Value})
	}
	command := commandLine(s.binary, s.flags)
	command = append(append([]string{s.binary}, s.subcommand...), command[1:]...)
	priority := systemNodeCriticalPriority
	var security *corev1.SecurityContext
	if s.asRoot {
		root := int64(0)
		security = &corev1.SecurityContext{RunAsUser: &root, RunAsGroup: &root}
	}
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        s.name,
			Namespace:   metav1.NamespaceSystem,
			Labels:      map[string]string{"component": s.name, "tier": "control-plane"},
			Annotations: s.annotations,
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:            s.name,
				Image:           s.image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         command,
				Env:             env,
				Ports: []corev1.ContainerPort{{
					Name:          probePortName,
					ContainerPort: s.health.port,
					Protocol:      corev1.ProtocolTCP,
				}},
				Resources:    corev1.ResourceRequirements{Requests: requests},
				VolumeMounts: volumeMounts,
				// kubeadm's timings: the kubelet restarts a component after
				// 80 s of failed liveness checks, while readiness follows
				// within seconds.
				LivenessProbe:   httpProbe(s.health, s.livez, 10, 8, 10*time.Second),
				ReadinessProbe:  httpProbe(s.health, s.readyz, 0, 3, time.Second),
				StartupProbe:    httpProbe(s.health, s.startup, 10, startupFailures(s.timeout), startupProbePeriod),
				SecurityContext: security,
			}},
			HostNetwork:       true,
			PriorityClassName: systemNodeCritical,
			Priority:          &priority,
			SecurityContext: &corev1.PodSecurityContext{
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Volumes: volumes,
		},
	}
}

// endpoint is where a component serves its health checks.
type endpoint struct {
	scheme corev1.URIScheme
	host   string // empty: the pod IP, which is the node's with host networking
	port   int32
}

// httpProbe returns a probe of path on ep. Every probe gets kubeadm's
// 15-second timeout: a loaded etcd or API server can be slow to answer.
func httpProbe(ep endpoint, path string, initialDelay, failures int32, period time.Duration) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Host:   ep.host,
			Path:   path,
			Port:   intstr.FromString(probePortName),
			Scheme: ep.scheme,
		}},
		InitialDelaySeconds: initialDelay,
		TimeoutSeconds:      15,
		PeriodSeconds:       int32(period / time.Second),
		FailureThreshold:    failures,
	}
}

// startupFailures lets the startup probe fail for as long as kubeboot waits
// for the control plane, so the kubelet does not restart a component that
// kubeboot is still willing to wait for.
func startupFailures(timeout time.Duration) int32 {
	if timeout <= 0 {
		timeout = config.DefaultControlPlaneWait
	}
	return int32(math.Ceil(float64(timeout) / float64(startupProbePeriod)))
}

// probeHost turns a bind address into a probe host: a wildcard address means
// "every interface", which the kubelet reaches through the pod IP.
func probeHost(bindAddress string) string {
	if ip := net.ParseIP(bindAddress); ip != nil && ip.IsUnspecified() {
		return ""
	}
	return bindAddress
}

// advertiseAddress checks the fields every builder relies on and returns the
// node's advertise address.
func advertiseAddress(cfg *config.ClusterConfiguration) (net.IP, error) {
	v, err := version.ParseSemantic(cfg.KubernetesVersion)
	if err != nil {
		return nil, fmt.Errorf("parse kubernetes version %q: %w", cfg.KubernetesVersion, err)
	}
	if v.Major() != 1 || v.Minor() < minMinor || v.Minor() > maxMinor {
		return nil, fmt.Errorf("check kubernetes version %q: kubeboot supports v1.%d to v1.%d", cfg.KubernetesVersion, minMinor, maxMinor)
	}
	ip := net.ParseIP(cfg.Node.AdvertiseAddress)
	if ip == nil {
		return nil, fmt.Errorf("parse advertise address %q: not an IP address", cfg.Node.AdvertiseAddress)
	}
	return ip, nil
}

// loopbackAddress is the address node-local listeners use: the loopback
// address of the advertise address's family, as kubeadm does for etcd.
func loopbackAddress(advertise net.IP) string {
	if advertise.To4() == nil {
		return "::1"
	}
	return "127.0.0.1"
}

// kubernetesImage returns the image of a Kubernetes component at the
// configured version.
func kubernetesImage(cfg *config.ClusterConfiguration, component string) string {
	return cfg.ImageRepository + "/" + component + ":" + cfg.KubernetesVersion
}

// cidrs normalises a comma-separated CIDR list: blanks around items are
// dropped, which the components' flag parsers would reject.
func cidrs(list string) string {
	var items []string
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s != "" {
			items = append(items, s)
		}
	}
	return strings.Join(items, ",")
}
