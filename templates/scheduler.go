package templates

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/internal/config"
)

// schedulerPort is kube-scheduler's default secure port.
const schedulerPort = config.PortScheduler

// Scheduler builds the kube-scheduler static pod. It serves its health
// checks on the loopback address with a certificate from the cluster CA.
func Scheduler(cfg *config.ClusterConfiguration) (*corev1.Pod, error) {
	advertise, err := advertiseAddress(cfg)
	if err != nil {
		return nil, fmt.Errorf("build %s pod: %w", config.NameScheduler, err)
	}
	kubeconfig := cfg.KubeconfigPath(config.KubeconfigScheduler)
	defaults := []flag{
		{"authentication-kubeconfig", kubeconfig},
		{"authorization-kubeconfig", kubeconfig},
		{"bind-address", loopbackAddress(advertise)},
		{"kubeconfig", kubeconfig},
		{"leader-elect", "true"},
		{"leader-elect-retry-period", leaderElectRetryPeriod},
		{"tls-cert-file", cfg.CertPath(config.CertScheduler)},
		{"tls-private-key-file", cfg.KeyPath(config.CertScheduler)},
	}
	flags := mergeFlags(append(defaults, schedulerSecurity(cfg)...), cfg.Scheduler.ExtraArgs)

	return newPod(spec{
		name:    config.NameScheduler,
		image:   kubernetesImage(cfg, config.NameScheduler),
		binary:  "kube-scheduler",
		flags:   flags,
		health:  secureEndpoint(flags, schedulerPort),
		livez:   "/livez",
		readyz:  "/readyz",
		startup: "/livez",
		cpu:     "100m",
		mounts: []hostMount{
			kubeconfigMount(cfg, config.KubeconfigScheduler),
			// The scheduler gets its serving pair file by file: mounting the
			// PKI directory would hand it the CA and service-account keys.
			{name: "serving-cert", path: cfg.CertPath(config.CertScheduler), readOnly: true, pathType: corev1.HostPathFile},
			{name: "serving-key", path: cfg.KeyPath(config.CertScheduler), readOnly: true, pathType: corev1.HostPathFile},
		},
		extra:   cfg.Scheduler,
		timeout: cfg.Timeouts.ControlPlane.Duration,
	}), nil
}
