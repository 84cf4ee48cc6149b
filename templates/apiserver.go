package templates

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/internal/config"
)

// shutdownWatchGrace is how long a stopping API server waits for the
// watches it closed to end; well under the pod's 30 s termination grace.
const shutdownWatchGrace = "5s"

// APIServer builds the kube-apiserver static pod. It serves on the node's
// advertise address and bind port and stores its data in the local etcd
// member or in the configured external etcd.
func APIServer(cfg *config.ClusterConfiguration) (*corev1.Pod, error) {
	advertise, err := advertiseAddress(cfg)
	if err != nil {
		return nil, fmt.Errorf("build %s pod: %w", config.NameAPIServer, err)
	}
	defaults := []flag{
		{"advertise-address", cfg.Node.AdvertiseAddress},
		{"allow-privileged", "true"},
		{"client-ca-file", cfg.CertPath(config.CertCA)},
		{"enable-bootstrap-token-auth", "true"},
		{"kubelet-client-certificate", cfg.CertPath(config.CertAPIServerKubeletClient)},
		{"kubelet-client-key", cfg.KeyPath(config.CertAPIServerKubeletClient)},
		{"kubelet-preferred-address-types", "InternalIP,ExternalIP,Hostname"},
		{"proxy-client-cert-file", cfg.CertPath(config.CertFrontProxyClient)},
		{"proxy-client-key-file", cfg.KeyPath(config.CertFrontProxyClient)},
		{"requestheader-allowed-names", "front-proxy-client"},
		{"requestheader-client-ca-file", cfg.CertPath(config.CertFrontProxyCA)},
		{"requestheader-extra-headers-prefix", "X-Remote-Extra-"},
		{"requestheader-group-headers", "X-Remote-Group"},
		{"requestheader-username-headers", "X-Remote-User"},
		{"secure-port", strconv.Itoa(int(cfg.APIServer.BindPort))},
		{"service-account-issuer", "https://kubernetes.default.svc." + cfg.Networking.DNSDomain},
		{"service-account-key-file", cfg.PublicKeyPath(config.KeyServiceAccount)},
		{"service-account-signing-key-file", cfg.KeyPath(config.KeyServiceAccount)},
		{"service-cluster-ip-range", cidrs(cfg.Networking.ServiceSubnet)},
		// Close open watches when stopping, so that the API server exits
		// at once instead of at the kubelet's SIGKILL 30 s later.
		{"shutdown-watch-termination-grace-period", shutdownWatchGrace},
		{"tls-cert-file", cfg.CertPath(config.CertAPIServer)},
		{"tls-private-key-file", cfg.KeyPath(config.CertAPIServer)},
	}
	// The API server refuses --authorization-mode together with a
	// structured --authorization-config, so the latter replaces the default.
	if !hasArg(cfg.APIServer.ExtraArgs, "authorization-config") {
		defaults = append(defaults, flag{"authorization-mode", "Node,RBAC"})
	}
	defaults = append(defaults, etcdClientFlags(cfg, advertise)...)
	securityFlags, securityMounts := apiServerSecurity(cfg)
	flags := mergeFlags(append(defaults, securityFlags...), cfg.APIServer.ExtraArgs)

	mounts := append([]hostMount{pkiMount(cfg)}, caBundleMounts()...)
	mounts = append(mounts, securityMounts...)
	if cfg.Etcd.External != nil {
		mounts = append(mounts, externalEtcdMounts(cfg)...)
	}
	return newPod(spec{
		name:   config.NameAPIServer,
		image:  kubernetesImage(cfg, config.NameAPIServer),
		binary: "kube-apiserver",
		flags:  flags,
		health: endpoint{
			scheme: corev1.URISchemeHTTPS,
			host:   apiServerProbeHost(flags),
			port:   portFlag(flags, "secure-port", cfg.APIServer.BindPort),
		},
		livez:   "/livez",
		readyz:  "/readyz",
		startup: "/livez",
		cpu:     "250m",
		mounts:  mounts,
		extra:   cfg.APIServer.Component,
		timeout: cfg.Timeouts.ControlPlane.Duration,
		annotations: map[string]string{AnnotationAPIServerEndpoint: net.JoinHostPort(cfg.Node.AdvertiseAddress,
			strconv.Itoa(int(portFlag(flags, "secure-port", cfg.APIServer.BindPort))))},
	}), nil
}

// etcdClientFlags point the API server at its etcd: the local member on the
// loopback address of the advertise address's family, or the external
// cluster with the user's certificates.
func etcdClientFlags(cfg *config.ClusterConfiguration, advertise net.IP) []flag {
	external := cfg.Etcd.External
	if external == nil {
		return []flag{
			{"etcd-cafile", cfg.CertPath(config.CertEtcdCA)},
			{"etcd-certfile", cfg.CertPath(config.CertAPIServerEtcdClient)},
			{"etcd-keyfile", cfg.KeyPath(config.CertAPIServerEtcdClient)},
			{"etcd-servers", etcdURL("https", loopbackAddress(advertise), etcdClientPort)},
		}
	}
	// Validation requires all three files of an external etcd.
	return []flag{
		{"etcd-cafile", external.CAFile},
		{"etcd-certfile", external.CertFile},
		{"etcd-keyfile", external.KeyFile},
		{"etcd-servers", strings.Join(external.Endpoints, ",")},
	}
}

// apiServerProbeHost probes the address the API server listens on: its
// --bind-address when that is a single address, else its advertise address.
func apiServerProbeHost(flags []flag) string {
	if bind, ok := flagValue(flags, "bind-address"); ok && probeHost(bind) != "" {
		return bind
	}
	advertise, _ := flagValue(flags, "advertise-address")
	return advertise
}
