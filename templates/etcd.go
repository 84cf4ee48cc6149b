package templates

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/internal/config"
)

// etcdImageTag is the tag of the etcd image for every supported Kubernetes
// version: kubeadm v1.36 maps v1.34, v1.35 and v1.36 all to etcd 3.6.8.
const etcdImageTag = "3.6.8-0"

// etcd's ports, as kubeadm uses them.
const (
	etcdClientPort  = config.PortEtcdClient
	etcdPeerPort    = config.PortEtcdPeer
	etcdMetricsPort = config.PortEtcdMetrics
)

// EtcdMembership is how this node's etcd member belongs to its cluster, a
// fact of the node rather than of its configuration. The zero value is the
// member that founds a new cluster of one, as init's does.
type EtcdMembership struct {
	// InitialCluster is the --initial-cluster (name=peerURL,...) of a
	// member that joined an existing cluster; "" for the founding member.
	InitialCluster string
}

// over is extra (the configuration's etcd flags) with the membership's
// over them: none for the founding member; for a joined one, the cluster
// it joined and --initial-cluster-state=existing, which replace the
// configuration's flags of those names, so that the member never founds a
// new cluster.
func (m EtcdMembership) over(extra []config.Arg) []config.Arg {
	if m.InitialCluster == "" {
		return extra
	}
	joined := []config.Arg{{Name: "initial-cluster", Value: m.InitialCluster}, {Name: "initial-cluster-state", Value: "existing"}}
	kept := slices.DeleteFunc(slices.Clone(extra), func(a config.Arg) bool {
		return slices.ContainsFunc(joined, func(j config.Arg) bool { return j.Name == a.Name })
	})
	return append(kept, joined...)
}

// Etcd builds the static pod of this node's etcd member, whose place in its
// cluster is m. It fails when cfg has no local etcd.
func Etcd(cfg *config.ClusterConfiguration, m EtcdMembership) (*corev1.Pod, error) {
	if cfg.Etcd.External != nil || cfg.Etcd.Local == nil {
		return nil, fmt.Errorf("build %s pod: the configuration has no local etcd", config.NameEtcd)
	}
	advertise, err := advertiseAddress(cfg)
	if err != nil {
		return nil, fmt.Errorf("build %s pod: %w", config.NameEtcd, err)
	}
	local := loopbackAddress(advertise)
	clientURL := etcdURL("https", cfg.Node.AdvertiseAddress, etcdClientPort)
	peerURL := etcdURL("https", cfg.Node.AdvertiseAddress, etcdPeerPort)
	// Local clients (the API server) use the loopback address; the
	// advertised one serves other nodes. An advertise address that is the
	// loopback address needs only one listener.
	listenClientURLs := clientURL
	if !advertise.Equal(net.ParseIP(local)) {
		listenClientURLs = etcdURL("https", local, etcdClientPort) + "," + clientURL
	}
	defaults := []flag{
		{"advertise-client-urls", clientURL},
		{"cert-file", cfg.CertPath(config.CertEtcdServer)},
		{"client-cert-auth", "true"},
		{"data-dir", cfg.Etcd.Local.DataDir},
		{"feature-gates", "InitialCorruptCheck=true"},
		{"initial-advertise-peer-urls", peerURL},
		{"initial-cluster", cfg.Node.Name + "=" + peerURL},
		{"key-file", cfg.KeyPath(config.CertEtcdServer)},
		{"listen-client-urls", listenClientURLs},
		{"listen-metrics-urls", etcdURL("http", local, etcdMetricsPort)},
		{"listen-peer-urls", peerURL},
		{"name", cfg.Node.Name},
		{"peer-cert-file", cfg.CertPath(config.CertEtcdPeer)},
		{"peer-client-cert-auth", "true"},
		{"peer-key-file", cfg.KeyPath(config.CertEtcdPeer)},
		{"peer-trusted-ca-file", cfg.CertPath(config.CertEtcdCA)},
		{"snapshot-count", "10000"},
		{"trusted-ca-file", cfg.CertPath(config.CertEtcdCA)},
		{"watch-progress-notify-interval", "5s"},
	}
	flags := mergeFlags(append(defaults, etcdSecurity(cfg)...), m.over(cfg.Etcd.Local.ExtraArgs))
	clientURLs, _ := flagValue(flags, "advertise-client-urls")

	return newPod(spec{
		name:    config.NameEtcd,
		image:   cfg.ImageRepository + "/etcd:" + etcdImageTag,
		binary:  "etcd",
		flags:   flags,
		health:  etcdMetricsEndpoint(flags, local),
		livez:   "/livez",
		readyz:  "/readyz",
		startup: "/readyz",
		cpu:     "100m",
		memory:  "100Mi",
		mounts: []hostMount{
			// etcd only reads its certificates; kubeadm mounts them read-write.
			{name: "etcd-certs", path: filepath.Dir(cfg.CertPath(config.CertEtcdCA)), readOnly: true, pathType: corev1.HostPathDirectory},
			{name: "etcd-data", path: cfg.Etcd.Local.DataDir, pathType: corev1.HostPathDirectoryOrCreate},
		},
		timeout:     cfg.Timeouts.ControlPlane.Duration,
		annotations: map[string]string{AnnotationEtcdClientURLs: clientURLs},
	}), nil
}

// etcdURL returns scheme://host:port, with brackets around an IPv6 host.
func etcdURL(scheme, host string, port int) string {
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port))
}

// etcdMetricsEndpoint is where the probes reach etcd's plain /livez and
// /readyz: the first --listen-metrics-urls, so an override moves them too.
func etcdMetricsEndpoint(flags []flag, local string) endpoint {
	ep := endpoint{scheme: corev1.URISchemeHTTP, host: local, port: etcdMetricsPort}
	value, _ := flagValue(flags, "listen-metrics-urls")
	first, _, _ := strings.Cut(value, ",")
	u, err := url.Parse(first)
	if err != nil {
		return ep
	}
	if u.Scheme == "https" {
		ep.scheme = corev1.URISchemeHTTPS
	}
	if u.Hostname() != "" {
		ep.host = probeHost(u.Hostname())
	}
	if port, err := strconv.ParseUint(u.Port(), 10, 16); err == nil && port > 0 {
		ep.port = int32(port)
	}
	return ep
}
