// Package health owns the control-plane health checks. It reads where each
// component serves from the static pod manifests, probes etcd through its
// client API and the other components through their HTTPS health endpoints
// with verified TLS, waits for all of them concurrently, and explains in the
// final error why a component is not healthy. Showing the progress is
// package output's.
//
// The package never writes to disk and never prints on its own: progress
// and results go through the callbacks and writers the caller passes.
package health

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/internal/config"
)

// The default secure ports of the components, used when a manifest does
// not set --secure-port.
const (
	defaultAPIServerPort         = 6443
	defaultControllerManagerPort = config.PortControllerManager
	defaultSchedulerPort         = config.PortScheduler
)

// etcdDefaultClientURL is where etcd listens and advertises when its
// manifest sets neither --listen-client-urls nor --advertise-client-urls.
const etcdDefaultClientURL = "http://localhost:2379"

// Target says where and how one component is checked. Every file is a node
// path, as written in the manifests and the configuration.
type Target struct {
	// Component is the component's name, such as config.NameAPIServer.
	Component string
	// Endpoints are the base URLs checked: one for a local component, one
	// per member for an external etcd.
	Endpoints []string
	// Paths are the HTTP paths checked in order on each endpoint; etcd has
	// none because it is checked through its client API.
	Paths []string
	// CAFile is the CA bundle that verifies the server certificate; empty
	// means the system roots.
	CAFile string
	// CertFile and KeyFile are the client certificate presented, if any.
	CertFile, KeyFile string
	// ServerCertFile is the component's own serving certificate, named in
	// diagnostics of a TLS failure; empty when unknown (external etcd).
	ServerCertFile string
	// External marks a component that does not run on this node, so the
	// kubelet cannot be the cause of its failures.
	External bool
}

// String is what the target probes, such as
// "https://10.0.0.1:6443/livez, /readyz".
func (t Target) String() string {
	var s []string
	for _, ep := range t.Endpoints {
		s = append(s, ep+strings.Join(t.Paths, ", "))
	}
	return strings.Join(s, ", ")
}

// Targets reads the check target of every control-plane component from its
// decoded manifest, keyed by component name, so that extra args and patches
// that move a port or a certificate are respected. An external etcd is
// checked at the configured endpoints instead. The targets come in start
// order: etcd, kube-apiserver, kube-controller-manager, kube-scheduler.
func Targets(cfg *config.ClusterConfiguration, pods map[string]*corev1.Pod) ([]Target, error) {
	var targets []Target
	for _, name := range config.ComponentNames {
		if name == config.NameEtcd && cfg.Etcd.External != nil {
			targets = append(targets, externalEtcdTarget(cfg.Etcd.External))
			continue
		}
		pod := pods[name]
		if pod == nil {
			return nil, fmt.Errorf("read health target of %q: no manifest given", name)
		}
		flags := CommandFlags(pod, name)
		var t Target
		var err error
		switch name {
		case config.NameEtcd:
			t = etcdTarget(cfg, flags)
		case config.NameAPIServer:
			t, err = apiServerTarget(cfg, flags)
		case config.NameControllerManager:
			t, err = loopbackTarget(cfg, name, flags, defaultControllerManagerPort, "/healthz")
		case config.NameScheduler:
			t, err = loopbackTarget(cfg, name, flags, defaultSchedulerPort, "/livez")
		}
		if err != nil {
			return nil, fmt.Errorf("read health target of %q: %w", name, err)
		}
		targets = append(targets, t)
	}
	return targets, nil
}

// etcdTarget checks the local member with the healthcheck client
// certificate, which exists for this purpose and is not an etcd flag.
func etcdTarget(cfg *config.ClusterConfiguration, flags map[string]string) Target {
	t := Target{Component: config.NameEtcd, Endpoints: []string{etcdClientURL(flags)}}
	if strings.HasPrefix(t.Endpoints[0], "https://") {
		// The etcd CA issued the serving certificate; --trusted-ca-file only
		// names the CA of client certificates, which happens to be the same.
		t.CAFile = cfg.CertPath(config.CertEtcdCA)
		t.CertFile = cfg.CertPath(config.CertEtcdHealthcheckClient)
		t.KeyFile = cfg.KeyPath(config.CertEtcdHealthcheckClient)
		t.ServerCertFile = flags["cert-file"]
	}
	return t
}

// etcdClientURL picks the local member's client URL: a loopback listener
// (https first) because it does not depend on the node's network, else the
// advertised URL, else the first listener. A wildcard listener is reached
// on the loopback address of its family.
func etcdClientURL(flags map[string]string) string {
	listen := splitURLs(flagOr(flags, "listen-client-urls", etcdDefaultClientURL))
	for i, u := range listen {
		if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
			listen[i].Host = net.JoinHostPort(loopbackFor(u.Hostname()), u.Port())
		}
	}
	var loopback []*url.URL
	for _, u := range listen {
		if isLoopback(u.Hostname()) {
			loopback = append(loopback, u)
		}
	}
	for _, u := range loopback {
		if u.Scheme == "https" {
			return u.String()
		}
	}
	if len(loopback) > 0 {
		return loopback[0].String()
	}
	if advertised := splitURLs(flagOr(flags, "advertise-client-urls", etcdDefaultClientURL)); len(advertised) > 0 {
		return advertised[0].String()
	}
	if len(listen) > 0 {
		return listen[0].String()
	}
	return etcdDefaultClientURL
}

// externalEtcdTarget checks every configured member with the credentials
// the API server uses.
func externalEtcdTarget(e *config.ExternalEtcd) Target {
	return Target{
		Component: config.NameEtcd,
		Endpoints: e.Endpoints,
		CAFile:    e.CAFile,
		CertFile:  e.CertFile,
		KeyFile:   e.KeyFile,
		External:  true,
	}
}

// apiServerTarget checks /livez and /readyz where the API server listens,
// authenticated with a client certificate of the cluster CA: both paths
// are open to every authenticated user.
func apiServerTarget(cfg *config.ClusterConfiguration, flags map[string]string) (Target, error) {
	host := flags["bind-address"]
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = flagOr(flags, "advertise-address", cfg.Node.AdvertiseAddress)
	}
	port, err := portFlag(flags, defaultAPIServerPort)
	if err != nil {
		return Target{}, err
	}
	return Target{
		Component: config.NameAPIServer,
		Endpoints: []string{"https://" + net.JoinHostPort(host, port)},
		Paths:     []string{"/livez", "/readyz"},
		// The cluster CA issued the serving certificate (--client-ca-file
		// verifies clients and may name another CA).
		CAFile:         cfg.CertPath(config.CertCA),
		CertFile:       cfg.CertPath(config.CertAPIServerKubeletClient),
		KeyFile:        cfg.KeyPath(config.CertAPIServerKubeletClient),
		ServerCertFile: flags["tls-cert-file"],
	}, nil
}

// loopbackTarget checks the controller manager or the scheduler, which
// serve their health checks to anonymous clients. kubeboot issues their
// serving certificates from the cluster CA, so TLS is verified against it.
func loopbackTarget(cfg *config.ClusterConfiguration, name string, flags map[string]string, defaultPort int, path string) (Target, error) {
	host := flags["bind-address"]
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = loopbackFor(host)
	}
	port, err := portFlag(flags, defaultPort)
	if err != nil {
		return Target{}, err
	}
	return Target{
		Component:      name,
		Endpoints:      []string{"https://" + net.JoinHostPort(host, port)},
		Paths:          []string{path},
		CAFile:         cfg.CertPath(config.CertCA),
		ServerCertFile: flags["tls-cert-file"],
	}, nil
}

// CommandFlags returns the flags on the command line of the component's
// container (or the pod's first container), in both the --name=value and
// the --name value forms. A repeated flag keeps its last value, as the
// components' flag parsers do.
func CommandFlags(pod *corev1.Pod, component string) map[string]string {
	containers := pod.Spec.Containers
	if len(containers) == 0 {
		return map[string]string{}
	}
	c := containers[0]
	for _, candidate := range containers {
		if candidate.Name == component {
			c = candidate
		}
	}
	args := append(append([]string{}, c.Command...), c.Args...)
	flags := map[string]string{}
	for i := 0; i < len(args); i++ {
		if !strings.HasPrefix(args[i], "-") {
			continue
		}
		name := strings.TrimLeft(args[i], "-")
		if n, value, ok := strings.Cut(name, "="); ok {
			flags[n] = value
			continue
		}
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			flags[name] = args[i+1]
			i++
			continue
		}
		flags[name] = "true"
	}
	return flags
}

// flagOr returns the flag's value, or fallback when it is unset or empty.
func flagOr(flags map[string]string, name, fallback string) string {
	if v := flags[name]; v != "" {
		return v
	}
	return fallback
}

// portFlag returns --secure-port, or the default when it is unset.
func portFlag(flags map[string]string, fallback int) (string, error) {
	value, ok := flags["secure-port"]
	if !ok || value == "" {
		return strconv.Itoa(fallback), nil
	}
	if port, err := strconv.ParseUint(value, 10, 16); err != nil || port == 0 {
		return "", fmt.Errorf("parse --secure-port %q: not a port number", value)
	}
	return value, nil
}

// splitURLs parses a comma-separated URL list, skipping what does not parse
// as scheme://host:port.
func splitURLs(list string) []*url.URL {
	var urls []*url.URL
	for _, s := range strings.Split(list, ",") {
		u, err := url.Parse(strings.TrimSpace(s))
		if err == nil && u.Scheme != "" && u.Host != "" {
			urls = append(urls, u)
		}
	}
	return urls
}

// loopbackFor returns the loopback address of a wildcard address's family:
// ::1 for "::", else 127.0.0.1.
func loopbackFor(wildcard string) string {
	if ip := net.ParseIP(wildcard); ip != nil && ip.To4() == nil {
		return "::1"
	}
	return "127.0.0.1"
}

// isLoopback reports whether host is localhost or a loopback IP.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
