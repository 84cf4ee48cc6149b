package templates

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/internal/config"
)

// controllerManagerPort is kube-controller-manager's default secure port.
const controllerManagerPort = config.PortControllerManager

// leaderElectRetryPeriod is how often a controller manager or a scheduler
// that does not lead tries to: 1 s, not the default 2 s (DIFFERENCES.md).
const leaderElectRetryPeriod = "1s"

// The controller manager's rate limit on its own client, which makes
// every controller's service account and its tokens as it starts: 100
// requests a second with bursts of 200, not the default 20 and 30, at
// which its start in a new cluster took 5 s (DIFFERENCES.md).
const (
	controllerManagerAPIQPS   = "100"
	controllerManagerAPIBurst = "200"
)

// ControllerManager builds the kube-controller-manager static pod. It
// serves its health checks on the loopback address with a certificate from
// the cluster CA, and allocates node pod CIDRs only when the configuration
// sets a pod subnet.
func ControllerManager(cfg *config.ClusterConfiguration) (*corev1.Pod, error) {
	advertise, err := advertiseAddress(cfg)
	if err != nil {
		return nil, fmt.Errorf("build %s pod: %w", config.NameControllerManager, err)
	}
	kubeconfig := cfg.KubeconfigPath(config.KubeconfigControllerManager)
	defaults := []flag{
		{"authentication-kubeconfig", kubeconfig},
		{"authorization-kubeconfig", kubeconfig},
		{"bind-address", loopbackAddress(advertise)},
		{"client-ca-file", cfg.CertPath(config.CertCA)},
		{"cluster-signing-cert-file", cfg.CertPath(config.CertCASigner)},
		{"cluster-signing-key-file", cfg.KeyPath(config.CertCA)},
		{"controllers", "*," + strings.Join(JoinControllers, ",")},
		{"kube-api-burst", controllerManagerAPIBurst},
		{"kube-api-qps", controllerManagerAPIQPS},
		{"kubeconfig", kubeconfig},
		{"leader-elect", "true"},
		{"leader-elect-retry-period", leaderElectRetryPeriod},
		{"requestheader-client-ca-file", cfg.CertPath(config.CertFrontProxyCA)},
		{"root-ca-file", cfg.CertPath(config.CertCA)},
		{"service-account-private-key-file", cfg.KeyPath(config.KeyServiceAccount)},
		// Node IPAM keeps pod CIDRs clear of the service range; kubeadm
		// passes the range only with a pod subnet, kubeboot always does,
		// so every component states the same service range.
		{"service-cluster-ip-range", cidrs(cfg.Networking.ServiceSubnet)},
		{"tls-cert-file", cfg.CertPath(config.CertControllerManager)},
		{"tls-private-key-file", cfg.KeyPath(config.CertControllerManager)},
		{"use-service-account-credentials", "true"},
	}
	if cfg.ClusterName != "" {
		defaults = append(defaults, flag{"cluster-name", cfg.ClusterName})
	}
	// Without a pod subnet the CNI plugin assigns pod addresses itself.
	if podSubnet := cidrs(cfg.Networking.PodSubnet); podSubnet != "" {
		defaults = append(defaults, flag{"allocate-node-cidrs", "true"}, flag{"cluster-cidr", podSubnet})
	}
	flags := mergeFlags(append(defaults, controllerManagerSecurity(cfg)...), cfg.ControllerManager.ExtraArgs)

	mounts := append([]hostMount{pkiMount(cfg), kubeconfigMount(cfg, config.KubeconfigControllerManager)}, caBundleMounts()...)
	return newPod(spec{
		name:   config.NameControllerManager,
		image:  kubernetesImage(cfg, config.NameControllerManager),
		binary: "kube-controller-manager",
		flags:  flags,
		health: secureEndpoint(flags, controllerManagerPort),
		// kube-controller-manager serves /healthz only, not /livez or /readyz.
		livez:   "/healthz",
		readyz:  "/healthz",
		startup: "/healthz",
		cpu:     "200m",
		mounts:  mounts,
		extra:   cfg.ControllerManager,
		timeout: cfg.Timeouts.ControlPlane.Duration,
	}), nil
}

// secureEndpoint is the HTTPS health endpoint of a controller manager or a
// scheduler, read from its final --bind-address and --secure-port.
func secureEndpoint(flags []flag, defaultPort int32) endpoint {
	bind, _ := flagValue(flags, "bind-address")
	return endpoint{
		scheme: corev1.URISchemeHTTPS,
		host:   probeHost(bind),
		port:   portFlag(flags, "secure-port", defaultPort),
	}
}

// JoinControllers are the controllers node join needs beyond the default
// ones, which `*` alone leaves off: bootstrapsigner signs cluster-info with
// each bootstrap token, for discovery, and tokencleaner deletes expired
// tokens. kubeadm enables both, and so does kubeboot's --controllers.
var JoinControllers = []string{"bootstrapsigner", "tokencleaner"}

// MissingJoinControllers returns the JoinControllers that a
// kube-controller-manager pod's --controllers flag leaves off (say, after
// an extraArgs override or a patch). Without the flag, only the default
// controllers run.
func MissingJoinControllers(pod *corev1.Pod) []string {
	var enabled []string
	for _, c := range pod.Spec.Containers {
		for _, arg := range append(slices.Clone(c.Command), c.Args...) {
			if value, ok := strings.CutPrefix(arg, "--controllers="); ok {
				enabled = strings.Split(value, ",")
			}
		}
	}
	var missing []string
	for _, name := range JoinControllers {
		if !slices.Contains(enabled, name) || slices.Contains(enabled, "-"+name) {
			missing = append(missing, name)
		}
	}
	return missing
}
