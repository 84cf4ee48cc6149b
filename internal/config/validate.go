package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// maxServiceHostBits is the largest service range the API server accepts:
// 20 bits of hosts (an IPv4 /12 or an IPv6 /108).
const maxServiceHostBits = 20

// minServiceHostBits is the smallest service range that holds the tenth
// address, cluster DNS's, below an IPv4 range's broadcast address: an IPv4
// /28 or an IPv6 /124.
const minServiceHostBits = 4

// Validate checks a defaulted configuration and reports every problem at
// once, each with its field path.
func Validate(c *ClusterConfiguration) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, dnsSubdomain(field.NewPath("clusterName"), c.ClusterName)...)
	errs = append(errs, validateVersion(field.NewPath("kubernetesVersion"), c.KubernetesVersion)...)
	errs = append(errs, validateNode(field.NewPath("node"), c.Node)...)
	errs = append(errs, validateControlPlaneRegistration(c)...)
	errs = append(errs, validateEndpoint(field.NewPath("controlPlaneEndpoint"), c.ControlPlaneEndpoint)...)
	errs = append(errs, validateNetworking(field.NewPath("networking"), c)...)
	errs = append(errs, validateEtcd(field.NewPath("etcd"), c.Etcd)...)
	errs = append(errs, validateAPIServer(field.NewPath("apiServer"), c.APIServer)...)
	errs = append(errs, validateComponent(field.NewPath("controllerManager"), c.ControllerManager)...)
	errs = append(errs, validateComponent(field.NewPath("scheduler"), c.Scheduler)...)
	errs = append(errs, validateCertificates(field.NewPath("certificates"), c.Certificates)...)
	errs = append(errs, absolutePath(field.NewPath("paths", "manifestsDir"), c.Paths.ManifestsDir)...)
	errs = append(errs, absolutePath(field.NewPath("paths", "kubeconfigDir"), c.Paths.KubeconfigDir)...)
	errs = append(errs, validateOwnedDirs(c)...)
	errs = append(errs, validateImageRepository(field.NewPath("imageRepository"), c)...)
	if c.PatchesDir != "" {
		errs = append(errs, absolutePath(field.NewPath("patchesDir"), c.PatchesDir)...)
	}
	errs = append(errs, absolutePath(field.NewPath("kubelet", "configFile"), c.Kubelet.ConfigFile)...)
	errs = append(errs, absolutePath(field.NewPath("kubelet", "certDir"), c.Kubelet.CertDir)...)
	errs = append(errs, validateCRIEndpoint(c.Kubelet.ContainerRuntimeEndpoint)...)
	errs = append(errs, validateInstallCommand(c.Kubelet.InstallCommand)...)
	errs = append(errs, validateSecurity(field.NewPath("security"), c.Security)...)
	errs = append(errs, validatePolicy(c)...)
	if c.Timeouts.ControlPlane.Duration <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("timeouts", "controlPlane"), c.Timeouts.ControlPlane.Duration.String(), "must be positive, like 4m"))
	}
	errs = append(errs, validateBootstrapToken(field.NewPath("bootstrapToken"), c.BootstrapToken)...)
	errs = append(errs, validateBootstrapTokens(field.NewPath("bootstrapTokens"), c.BootstrapTokens)...)
	errs = append(errs, validateCSRApprover(field.NewPath("csrApprover"), c.CSRApprover)...)
	if c.CertificateKey != "" {
		errs = append(errs, validateCertificateKey(field.NewPath("certificateKey"), c.CertificateKey)...)
	}
	errs = append(errs, validateAddons(field.NewPath("addons"), c.Addons, c.Networking.PodSubnet)...)
	return errs
}

// validateInstallCommand accepts an empty kubelet.installCommand or one
// whose program is an absolute path, as systemd runs it, and whose
// arguments are not empty.
func validateInstallCommand(argv []string) field.ErrorList {
	path := field.NewPath("kubelet", "installCommand")
	if len(argv) == 0 {
		return nil
	}
	if !filepath.IsAbs(argv[0]) {
		return field.ErrorList{field.Invalid(path.Index(0), argv[0], "want the program's absolute path, like /usr/bin/apt-get or /bin/sh")}
	}
	for i, arg := range argv[1:] {
		if arg == "" {
			return field.ErrorList{field.Invalid(path.Index(i+1), arg, "want no empty argument")}
		}
	}
	return nil
}

// validateCRIEndpoint accepts a unix socket URL, as the kubelet's
// containerRuntimeEndpoint.
func validateCRIEndpoint(endpoint string) field.ErrorList {
	if u, err := url.Parse(endpoint); err != nil || u.Scheme != "unix" || !filepath.IsAbs(u.Path) {
		return field.ErrorList{field.Invalid(field.NewPath("kubelet", "containerRuntimeEndpoint"), endpoint, "want a unix socket URL like "+DefaultCRIEndpoint)}
	}
	return nil
}

// MinCertValidity is the shortest lifetime of a certificate kubeboot
// issues: shorter ones expire before the control plane is up.
const MinCertValidity = time.Hour

// componentImages are the control-plane images kubeboot renders from
// imageRepository.
var componentImages = []string{NameEtcd, NameAPIServer, NameControllerManager, NameScheduler, "kube-proxy", "coredns/coredns"}

// registryHost is a registry's host name, and pathComponent one part of a
// repository's path, as the OCI distribution specification has them.
var (
	registryHost  = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$`)
	pathComponent = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*$`)
)

// validateImageRepository wants a registry path, without tag or trailing
// slash, from which every image kubeboot renders is a valid reference.
func validateImageRepository(p *field.Path, c *ClusterConfiguration) field.ErrorList {
	repo := c.ImageRepository
	if repo == "" || strings.HasSuffix(repo, "/") || strings.ContainsAny(repo, " :@") {
		return field.ErrorList{field.Invalid(p, repo, "want a registry path like registry.k8s.io, without tag or trailing slash")}
	}
	host, path, _ := strings.Cut(repo, "/")
	if !strings.ContainsAny(host, ".:") && host != "localhost" {
		host, path = "", repo // Docker's rule: a first part without a dot is a path
	}
	if host != "" && !registryHost.MatchString(host) {
		return field.ErrorList{field.Invalid(p, repo, "the registry "+host+" is not a host name: want a registry path like registry.k8s.io or registry.example/mirror")}
	}
	for _, part := range strings.Split(path, "/") {
		if path != "" && !pathComponent.MatchString(part) {
			return field.ErrorList{field.Invalid(p, repo, fmt.Sprintf("%q is not a repository path component (lower-case letters and digits, separated by '.', '_', '__' or '-'): want a registry path like registry.k8s.io or registry.example/mirror", part))}
		}
	}
	for _, image := range componentImages {
		ref := repo + "/" + image + ":" + DefaultKubernetesVersion
		if _, err := name.ParseReference(ref); err != nil {
			return field.ErrorList{field.Invalid(p, repo, "renders invalid image references such as "+ref+" ("+err.Error()+
				"): want a registry and path of lower-case letters, digits and separators, like registry.k8s.io or registry.example/mirror")}
		}
	}
	return nil
}

// MinBootstrapTokenTTL is the shortest token lifetime: a node must be able
// to use the token that init prints.
const MinBootstrapTokenTTL = time.Minute

func validateBootstrapToken(p *field.Path, b BootstrapToken) field.ErrorList {
	if ttl := b.TTL.Duration; ttl < MinBootstrapTokenTTL {
		return field.ErrorList{field.Invalid(p.Child("ttl"), ttl.String(),
			"must be at least 1m, like 24h: a node joins with the token after init prints it")}
	}
	return nil
}

// validateVersion checks kubernetesVersion with the grammar of every
// Kubernetes version kubeboot takes (ParseKubernetesVersion).
func validateVersion(p *field.Path, s string) field.ErrorList {
	if _, err := ParseKubernetesVersion(s); err != nil {
		return field.ErrorList{field.Invalid(p, s, err.Error())}
	}
	return nil
}

func validateNode(p *field.Path, n NodeRegistration) field.ErrorList {
	errs := dnsSubdomain(p.Child("name"), n.Name)
	ip := net.ParseIP(n.AdvertiseAddress)
	switch {
	case ip == nil:
		errs = append(errs, field.Invalid(p.Child("advertiseAddress"), n.AdvertiseAddress, "want an IP address"))
	case ip.IsUnspecified():
		errs = append(errs, field.Invalid(p.Child("advertiseAddress"), n.AdvertiseAddress, "must be a routable address, not the unspecified one"))
	}
	return append(errs, validateSecondaryAddress(p, "advertiseAddress", n.AdvertiseAddress, n.SecondaryAddress)...)
}

// validateSecondaryAddress accepts no secondary address, or one of the
// other IP family than the node's address (the field named primary),
// which the kubelet takes as its second node IP.
func validateSecondaryAddress(p *field.Path, primary, address, secondary string) field.ErrorList {
	if secondary == "" {
		return nil
	}
	s := net.ParseIP(secondary)
	a := net.ParseIP(address)
	switch {
	case s == nil:
		return field.ErrorList{field.Invalid(p.Child("secondaryAddress"), secondary, "want an IP address of this node of the other family than "+primary+", or leave it out")}
	case s.IsUnspecified() || s.IsLoopback():
		return field.ErrorList{field.Invalid(p.Child("secondaryAddress"), secondary, "the kubelet refuses an unspecified or loopback node IP: use an address other nodes reach this node at")}
	case address == "":
		return field.ErrorList{field.Required(p.Child(primary), "a secondaryAddress needs the node's first address too: set "+primary)}
	case a != nil && isIPv4(a) == isIPv4(s):
		return field.ErrorList{field.Invalid(p.Child("secondaryAddress"), secondary, "of the same IP family as "+primary+" ("+address+"): a dual-stack node has one address of each family")}
	}
	return nil
}

func validateEndpoint(p *field.Path, endpoint string) field.ErrorList {
	if endpoint == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(endpoint)
	if err != nil { // no port: the whole value is the host
		host, port = strings.Trim(endpoint, "[]"), ""
	}
	var errs field.ErrorList
	if port != "" {
		errs = append(errs, validPort(p, port)...)
	}
	if net.ParseIP(host) == nil && len(validation.IsDNS1123Subdomain(host)) > 0 {
		errs = append(errs, field.Invalid(p, endpoint, "want host or host:port, where host is an IP address or a DNS name"))
	}
	return errs
}

func validPort(p *field.Path, port string) field.ErrorList {
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return field.ErrorList{field.Invalid(p, port, "port must be between 1 and 65535")}
	}
	return nil
}

func validateNetworking(p *field.Path, c *ClusterConfiguration) field.ErrorList {
	n := c.Networking
	services, errs := cidrList(p.Child("serviceSubnet"), n.ServiceSubnet)
	for _, s := range services {
		ones, bits := s.Mask.Size()
		if bits-ones > maxServiceHostBits {
			errs = append(errs, field.Invalid(p.Child("serviceSubnet"), s.String(), fmt.Sprintf("too large: at most %d bits of hosts (an IPv4 /12, an IPv6 /108)", maxServiceHostBits)))
		}
		if bits-ones < minServiceHostBits {
			errs = append(errs, field.Invalid(p.Child("serviceSubnet"), s.String(), fmt.Sprintf(
				"too small: kubeboot takes the first address (%s, the API server's Service) and the tenth (%s, cluster DNS, every kubelet's clusterDNS) from it; use at least an IPv4 /%d or an IPv6 /%d",
				nthAddress(s, 1), nthAddress(s, 10), 32-minServiceHostBits, 128-minServiceHostBits)))
		}
	}
	pods, podErrs := cidrList(p.Child("podSubnet"), n.PodSubnet)
	errs = append(errs, podErrs...)
	if len(services) > 0 && len(pods) > 0 && len(services) != len(pods) {
		errs = append(errs, field.Invalid(p.Child("podSubnet"), n.PodSubnet, "dual-stack needs one CIDR per family in both serviceSubnet and podSubnet"))
	}
	for _, s := range services {
		for _, q := range pods {
			if s.Contains(q.IP) || q.Contains(s.IP) {
				errs = append(errs, field.Invalid(p.Child("podSubnet"), q.String(), "overlaps serviceSubnet "+s.String()))
			}
		}
	}
	if ip := net.ParseIP(c.Node.AdvertiseAddress); ip != nil && len(services) > 0 && isIPv4(ip) != isIPv4(services[0].IP) {
		errs = append(errs, field.Invalid(p.Child("serviceSubnet"), n.ServiceSubnet,
			"the first CIDR must be of the advertise address's IP family ("+c.Node.AdvertiseAddress+"): the API server requires it"))
	}
	errs = append(errs, dnsSubdomain(p.Child("dnsDomain"), n.DNSDomain)...)
	return errs
}

// cidrList parses one CIDR, or two of different families for dual-stack.
func cidrList(p *field.Path, list string) ([]*net.IPNet, field.ErrorList) {
	var nets []*net.IPNet
	var errs field.ErrorList
	for _, s := range splitList(list) {
		ip, n, err := net.ParseCIDR(s)
		if err != nil {
			errs = append(errs, field.Invalid(p, s, "want a CIDR like 10.96.0.0/12"))
			continue
		}
		if !ip.Equal(n.IP) {
			errs = append(errs, field.Invalid(p, s, "has host bits set: use "+n.String()))
		}
		nets = append(nets, n)
	}
	switch {
	case len(nets) > 2:
		errs = append(errs, field.Invalid(p, list, "at most two CIDRs, one per IP family"))
	case len(nets) == 2 && isIPv4(nets[0].IP) == isIPv4(nets[1].IP):
		errs = append(errs, field.Invalid(p, list, "dual-stack needs one IPv4 and one IPv6 CIDR"))
	}
	return nets, errs
}

func isIPv4(ip net.IP) bool { return ip.To4() != nil }

func validateEtcd(p *field.Path, e Etcd) field.ErrorList {
	var errs field.ErrorList
	switch {
	case e.Local != nil && e.External != nil:
		return field.ErrorList{field.Forbidden(p, "set either local or external, not both")}
	case e.Local != nil:
		l := p.Child("local")
		errs = append(errs, absolutePath(l.Child("dataDir"), e.Local.DataDir)...)
		errs = append(errs, absolutePath(l.Child("snapshotsDir"), e.Local.SnapshotsDir)...)
		errs = append(errs, validateScheduledSnapshots(l.Child("scheduledSnapshots"), e.Local.ScheduledSnapshots)...)
		errs = append(errs, validateArgs(l.Child("extraArgs"), e.Local.ExtraArgs)...)
		errs = append(errs, validateSANs(l.Child("serverCertSANs"), e.Local.ServerCertSANs)...)
		errs = append(errs, validateSANs(l.Child("peerCertSANs"), e.Local.PeerCertSANs)...)
	case e.External != nil:
		x := p.Child("external")
		if len(e.External.Endpoints) == 0 {
			errs = append(errs, field.Required(x.Child("endpoints"), "list the client URLs of the etcd members"))
		}
		for i, ep := range e.External.Endpoints {
			if u, err := url.Parse(ep); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				errs = append(errs, field.Invalid(x.Child("endpoints").Index(i), RedactedURL(ep), "want a URL like https://10.0.0.2:2379"))
			}
		}
		errs = append(errs, absolutePath(x.Child("caFile"), e.External.CAFile)...)
		errs = append(errs, absolutePath(x.Child("certFile"), e.External.CertFile)...)
		errs = append(errs, absolutePath(x.Child("keyFile"), e.External.KeyFile)...)
	}
	return errs
}

func validateAPIServer(p *field.Path, a APIServer) field.ErrorList {
	errs := validateComponent(p, a.Component)
	errs = append(errs, validateSANs(p.Child("certSANs"), a.CertSANs)...)
	if a.BindPort < 1 || a.BindPort > 65535 {
		errs = append(errs, field.Invalid(p.Child("bindPort"), a.BindPort, "port must be between 1 and 65535"))
	}
	return errs
}

func validateComponent(p *field.Path, c Component) field.ErrorList {
	errs := validateArgs(p.Child("extraArgs"), c.ExtraArgs)
	volumes := map[string]bool{}
	for i, v := range c.ExtraVolumes {
		vp := p.Child("extraVolumes").Index(i)
		for _, msg := range validation.IsDNS1123Label(v.Name) {
			errs = append(errs, field.Invalid(vp.Child("name"), v.Name, msg))
		}
		if volumes[v.Name] {
			errs = append(errs, field.Duplicate(vp.Child("name"), v.Name))
		}
		volumes[v.Name] = true
		errs = append(errs, absolutePath(vp.Child("hostPath"), v.HostPath)...)
		errs = append(errs, absolutePath(vp.Child("mountPath"), v.MountPath)...)
		if !slices.Contains(hostPathTypes, v.PathType) {
			errs = append(errs, field.NotSupported(vp.Child("pathType"), v.PathType, hostPathTypeNames()))
		}
	}
	env := map[string]bool{}
	for i, e := range c.ExtraEnv {
		ep := p.Child("extraEnv").Index(i).Child("name")
		for _, msg := range validation.IsEnvVarName(e.Name) {
			errs = append(errs, field.Invalid(ep, e.Name, msg))
		}
		if env[e.Name] {
			errs = append(errs, field.Duplicate(ep, e.Name))
		}
		env[e.Name] = true
	}
	return errs
}

var hostPathTypes = []corev1.HostPathType{
	corev1.HostPathUnset, corev1.HostPathDirectoryOrCreate, corev1.HostPathDirectory,
	corev1.HostPathFileOrCreate, corev1.HostPathFile, corev1.HostPathSocket,
	corev1.HostPathCharDev, corev1.HostPathBlockDev,
}

func hostPathTypeNames() []string {
	var names []string
	for _, t := range hostPathTypes[1:] {
		names = append(names, string(t))
	}
	return names
}

// flagName is what the components' flag names are made of. Anything else,
// a newline above all, could smuggle a second flag into the command line.
var flagName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]*$`)

func validateArgs(p *field.Path, args []Arg) field.ErrorList {
	var errs field.ErrorList
	for i, a := range args {
		ap := p.Index(i)
		if !flagName.MatchString(a.Name) {
			errs = append(errs, field.Invalid(ap.Child("name"), a.Name, "want a flag name of letters, digits and '-', without leading dashes or '=', like profiling"))
		}
		switch {
		case a.Remove && a.Value != "":
			errs = append(errs, field.Invalid(ap.Child("value"), a.Value, "a removed flag takes no value: drop value or remove"))
		case strings.ContainsFunc(a.Value, unicode.IsControl):
			errs = append(errs, field.Invalid(ap.Child("value"), a.Value, "must not contain a newline or other control character"))
		}
	}
	return errs
}

func validateSANs(p *field.Path, sans []string) field.ErrorList {
	var errs field.ErrorList
	for i, s := range sans {
		if net.ParseIP(s) == nil && len(validation.IsWildcardDNS1123Subdomain(s)) > 0 && len(validation.IsDNS1123Subdomain(s)) > 0 {
			errs = append(errs, field.Invalid(p.Index(i), s, "want an IP address or a DNS name"))
		}
	}
	return errs
}

func validateCertificates(p *field.Path, c Certificates) field.ErrorList {
	errs := absolutePath(p.Child("dir"), c.Dir)
	if !slices.Contains(KeyAlgorithms, c.KeyAlgorithm) {
		var names []string
		for _, a := range KeyAlgorithms {
			names = append(names, string(a))
		}
		errs = append(errs, field.NotSupported(p.Child("keyAlgorithm"), c.KeyAlgorithm, names))
	}
	// metav1.Duration's own String is the protobuf debug form
	// (&Duration{Duration:-5m0s,}): print the time.Duration.
	if c.CAValidity.Duration <= 0 {
		errs = append(errs, field.Invalid(p.Child("caValidity"), c.CAValidity.Duration.String(), "must be positive, like 87600h"))
	}
	if c.CAValidity.Duration > 0 && c.CAValidity.Duration < MinCertValidity {
		errs = append(errs, field.Invalid(p.Child("caValidity"), c.CAValidity.Duration.String(), "too short: at least 1h, like 87600h; a CA that expires within the hour takes the cluster down with it"))
	}
	switch leaf := c.LeafValidity.Duration; {
	case leaf <= 0 || leaf > c.CAValidity.Duration:
		errs = append(errs, field.Invalid(p.Child("leafValidity"), leaf.String(), "must be positive and no longer than caValidity"))
	case leaf < MinCertValidity:
		errs = append(errs, field.Invalid(p.Child("leafValidity"), leaf.String(), "too short: at least 1h, like 8760h; kubeboot would write certificates that expire before the control plane is up"))
	}
	switch {
	case c.RenewBefore.Duration < 0:
		errs = append(errs, field.Invalid(p.Child("renewBefore"), c.RenewBefore.Duration.String(), "must not be negative, like 720h"))
	case c.RenewBefore.Duration >= c.LeafValidity.Duration:
		errs = append(errs, field.Invalid(p.Child("renewBefore"), c.RenewBefore.Duration.String(), "must be shorter than leafValidity, or every run would renew"))
	}
	if c.CA != nil {
		errs = append(errs, validateCA(p.Child("ca"), *c.CA)...)
	}
	if r := c.ScheduledRenewal; r != nil && r.Interval.Duration < MinRenewalInterval {
		errs = append(errs, field.Invalid(p.Child("scheduledRenewal", "interval"), r.Interval.Duration.String(), "too short: at least 1m, like 12h"))
	}
	return errs
}

// validateCA wants a CA certificate and the private key of its public key.
// No error shows the key.
func validateCA(p *field.Path, ca CertificateAuthority) field.ErrorList {
	pair, err := tls.X509KeyPair([]byte(ca.Cert), []byte(ca.Key))
	if err != nil {
		return field.ErrorList{field.Invalid(p, Hidden, "want cert, a PEM certificate, and key, the PEM private key of that certificate, as `kubeboot config fleet` writes them: "+err.Error())}
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return field.ErrorList{field.Invalid(p.Child("cert"), Hidden, err.Error())}
	}
	if !cert.IsCA {
		return field.ErrorList{field.Invalid(p.Child("cert"), cert.Subject.CommonName, "not a CA certificate: want the cluster CA's")}
	}
	return nil
}

func absolutePath(p *field.Path, path string) field.ErrorList {
	if !filepath.IsAbs(path) {
		return field.ErrorList{field.Invalid(p, path, "must be an absolute path")}
	}
	if filepath.Clean(path) != path {
		return field.ErrorList{field.Invalid(p, path, "not clean: use "+filepath.Clean(path))}
	}
	return nil
}

func dnsSubdomain(p *field.Path, s string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(s) {
		errs = append(errs, field.Invalid(p, s, msg))
	}
	return errs
}
