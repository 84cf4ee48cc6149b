package config

import (
	"fmt"
	"math/big"
	"net"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Addons are the cluster's DNS and Service proxy, which init's addon phase
// installs and upgrade apply moves with the control plane, and the user's
// own manifests, which init applies after them and upgrade apply applies
// again. Either addon can be turned off for a cluster that brings its own
// (another DNS server at the kubelets' clusterDNS address, a kube-proxy
// replacement).
type Addons struct {
	// CoreDNS is the cluster DNS: Deployment coredns behind Service kube-dns.
	CoreDNS CoreDNS `json:"coreDNS"`
	// KubeProxy is the Service proxy: DaemonSet kube-proxy on every node.
	KubeProxy KubeProxy `json:"kubeProxy"`
	// CNI is the pod network: DaemonSet kube-flannel on every node, or
	// none for one the user brings.
	CNI CNI `json:"cni"`
	// Manifests are the user's own objects, which the addon/manifests
	// phase applies by server-side apply: each an absolute path of a YAML
	// or JSON file (one or more documents) or of a directory, whose *.yaml,
	// *.yml and *.json files are read in name order (not its
	// subdirectories). Namespaces and CustomResourceDefinitions are
	// applied first, then every other object in the order given.
	Manifests []string `json:"manifests,omitempty"`
}

// CoreDNS configures the cluster DNS addon.
type CoreDNS struct {
	// Disabled leaves cluster DNS out: the addon phase neither creates nor
	// changes its objects.
	Disabled bool `json:"disabled,omitempty"`
	// Image is CoreDNS's image (default: <imageRepository>/coredns/coredns
	// at the version kubeadm pins for kubernetesVersion's minor).
	Image string `json:"image,omitempty"`
	// Replicas is the Deployment's replica count (default 2).
	Replicas *int32 `json:"replicas,omitempty"`
}

// KubeProxy configures the Service proxy addon.
type KubeProxy struct {
	// Disabled leaves the Service proxy out, for a replacement such as
	// Cilium's: the addon phase neither creates nor changes its objects.
	Disabled bool `json:"disabled,omitempty"`
	// Image is kube-proxy's image (default:
	// <imageRepository>/kube-proxy:<kubernetesVersion>).
	Image string `json:"image,omitempty"`
	// Mode is how kube-proxy programs Services: nftables (the default;
	// Linux 5.13 or later) or iptables.
	Mode string `json:"mode,omitempty"`
	// ExtraConfig holds KubeProxyConfiguration fields that override the
	// generated ones, such as {conntrack: {maxPerCore: 0}}.
	ExtraConfig map[string]any `json:"extraConfig,omitempty"`
}

// CNI configures the pod network addon.
type CNI struct {
	// Provider is the pod network kubeboot installs: flannel (the
	// default), VXLAN between the nodes, so that nodes on different
	// subnets reach each other's pods, or none, for a pod network the user
	// installs: nodes stay NotReady until it runs.
	Provider string `json:"provider,omitempty"`
	// Image is flanneld's image (default DefaultFlannelImage).
	Image string `json:"image,omitempty"`
	// PluginImage is the image of flannel's CNI plugin, which the
	// DaemonSet copies into each node's /opt/cni/bin (default
	// DefaultFlannelPluginImage).
	PluginImage string `json:"pluginImage,omitempty"`
}

// The addons.cni providers.
const (
	CNIFlannel = "flannel"
	CNINone    = "none"
)

// The images of the pod network this release of kubeboot pins: those of
// flannel's own manifest for the release.
const (
	DefaultFlannelImage       = "ghcr.io/flannel-io/flannel:v0.28.10"
	DefaultFlannelPluginImage = "ghcr.io/flannel-io/flannel-cni-plugin:v1.9.1-flannel3"
	// DefaultFlannelPodSubnet is networking.podSubnet's default in an IPv4
	// cluster whose pod network is flannel: flannel's own default.
	DefaultFlannelPodSubnet = "10.244.0.0/16"
)

// The kube-proxy modes kubeboot configures.
const (
	ProxyModeNftables = "nftables"
	ProxyModeIPTables = "iptables"
)

// DefaultCoreDNSReplicas is the default addons.coreDNS.replicas: two, on
// two nodes when there are two, so that DNS survives one pod's loss.
const DefaultCoreDNSReplicas = 2

// CoreDNSVersions are the CoreDNS releases kubeadm pins, by Kubernetes
// minor version; upgrade apply moves CoreDNS to the new minor's pin.
var CoreDNSVersions = map[uint]string{
	34: "v1.12.1",
	35: "v1.13.1",
	36: "v1.14.2",
}

// DefaultCoreDNSImage is the default addons.coreDNS.image for a
// kubernetesVersion and imageRepository, or "" for a kubernetesVersion
// that ParseKubernetesVersion refuses.
func DefaultCoreDNSImage(imageRepository, kubernetesVersion string) string {
	v, err := ParseKubernetesVersion(kubernetesVersion)
	if err != nil {
		return ""
	}
	return imageRepository + "/coredns/coredns:" + CoreDNSVersions[v.Minor()]
}

// DefaultKubeProxyImage is the default addons.kubeProxy.image, or "" for a
// kubernetesVersion that ParseKubernetesVersion refuses.
func DefaultKubeProxyImage(imageRepository, kubernetesVersion string) string {
	v, err := ParseKubernetesVersion(kubernetesVersion)
	if err != nil {
		return ""
	}
	return imageRepository + "/kube-proxy:v" + v.String()
}

// ClusterDNSIP is the tenth address of the first service range, where
// cluster DNS lives: the kube-dns Service's cluster IP and the kubelets'
// clusterDNS. It assumes a validated configuration.
func (c *ClusterConfiguration) ClusterDNSIP() string {
	subnets := c.ServiceSubnets()
	if len(subnets) == 0 {
		return ""
	}
	return nthAddress(subnets[0], 10).String()
}

// ClusterDNSIPs are the kube-dns Service's cluster IPs: the tenth address
// of each service range, one per IP family.
func (c *ClusterConfiguration) ClusterDNSIPs() []string {
	var ips []string
	for _, n := range c.ServiceSubnets() {
		ips = append(ips, nthAddress(n, 10).String())
	}
	return ips
}

func nthAddress(n *net.IPNet, i int64) net.IP {
	ip := new(big.Int).SetBytes(n.IP)
	ip.Add(ip, big.NewInt(i))
	raw := ip.Bytes()
	out := make(net.IP, len(n.IP))
	copy(out[len(out)-len(raw):], raw)
	return out
}

func setAddonDefaults(c *ClusterConfiguration) {
	a := &c.Addons
	setString(&a.CoreDNS.Image, DefaultCoreDNSImage(c.ImageRepository, c.KubernetesVersion))
	if a.CoreDNS.Replicas == nil {
		replicas := int32(DefaultCoreDNSReplicas)
		a.CoreDNS.Replicas = &replicas
	}
	setString(&a.KubeProxy.Image, DefaultKubeProxyImage(c.ImageRepository, c.KubernetesVersion))
	setString(&a.KubeProxy.Mode, ProxyModeNftables)
	setString(&a.CNI.Provider, CNIFlannel)
	if a.CNI.Provider == CNIFlannel {
		setString(&a.CNI.Image, DefaultFlannelImage)
		setString(&a.CNI.PluginImage, DefaultFlannelPluginImage)
		// flannel gives each node a slice of the pod subnet. An IPv4
		// cluster that names none gets flannel's own default, as k3s's
		// and Talos's do; a dual-stack or IPv6 one must name its own.
		if services := c.ServiceSubnets(); c.Networking.PodSubnet == "" && len(services) == 1 && services[0].IP.To4() != nil {
			c.Networking.PodSubnet = DefaultFlannelPodSubnet
		}
	}
}

// validateAddons checks the addons. An image is empty only where its
// default comes from a kubernetesVersion that has its own error.
func validateAddons(p *field.Path, a Addons, podSubnet string) field.ErrorList {
	var errs field.ErrorList
	dns, proxy := p.Child("coreDNS"), p.Child("kubeProxy")
	if a.CoreDNS.Image != "" {
		errs = append(errs, validateTaggedImage(dns.Child("image"), a.CoreDNS.Image, "registry.k8s.io/coredns/coredns:"+CoreDNSVersions[MaxKubernetesMinor])...)
	}
	if r := a.CoreDNS.Replicas; r != nil && *r < 0 {
		errs = append(errs, field.Invalid(dns.Child("replicas"), *r, "must be 0 or more; set disabled: true to leave CoreDNS out"))
	}
	if a.KubeProxy.Image != "" {
		errs = append(errs, validateTaggedImage(proxy.Child("image"), a.KubeProxy.Image, "registry.k8s.io/kube-proxy:"+DefaultKubernetesVersion)...)
	}
	if m := a.KubeProxy.Mode; m != ProxyModeNftables && m != ProxyModeIPTables {
		errs = append(errs, field.NotSupported(proxy.Child("mode"), m, []string{ProxyModeNftables, ProxyModeIPTables}))
	}
	for _, key := range []string{"apiVersion", "kind", "mode", "clusterCIDR"} {
		if _, set := a.KubeProxy.ExtraConfig[key]; set {
			errs = append(errs, field.Forbidden(proxy.Child("extraConfig", key), fmt.Sprintf("kubeboot sets %s: use addons.kubeProxy.mode or networking.podSubnet", key)))
		}
	}
	errs = append(errs, validateCNI(p.Child("cni"), a.CNI, podSubnet)...)
	return append(errs, validateManifestPaths(p.Child("manifests"), a.Manifests)...)
}

// validateCNI wants a known provider, a pod subnet for flannel, and
// images only for flannel: with
// none, kubeboot installs no pod network, so an image there would be
// ignored in silence.
func validateCNI(p *field.Path, c CNI, podSubnet string) field.ErrorList {
	switch c.Provider {
	case CNIFlannel:
		errs := append(validateTaggedImage(p.Child("image"), c.Image, DefaultFlannelImage),
			validateTaggedImage(p.Child("pluginImage"), c.PluginImage, DefaultFlannelPluginImage)...)
		if podSubnet == "" {
			errs = append(errs, field.Required(p.Child("provider"), "flannel needs networking.podSubnet, one CIDR per family, such as 10.244.0.0/16,fd00:10:244::/56; or set provider: none and bring your own pod network"))
		}
		return errs
	case CNINone:
		var errs field.ErrorList
		for _, f := range []struct{ name, image string }{{"image", c.Image}, {"pluginImage", c.PluginImage}} {
			if f.image != "" {
				errs = append(errs, field.Forbidden(p.Child(f.name), "provider none installs no pod network: remove "+f.name+", or set provider: flannel"))
			}
		}
		return errs
	default:
		return field.ErrorList{field.NotSupported(p.Child("provider"), c.Provider, []string{CNIFlannel, CNINone})}
	}
}

// validateManifestPaths wants each of addons.manifests absolute and clean,
// and given once: a relative path would depend on the directory kubeboot
// runs in, which differs between init, upgrade apply and the bootstrap
// service.
func validateManifestPaths(p *field.Path, paths []string) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, path := range paths {
		switch {
		case !filepath.IsAbs(path):
			errs = append(errs, field.Invalid(p.Index(i), path, "must be an absolute path of a YAML or JSON file or of a directory of them, like /etc/kubeboot/manifests"))
		case filepath.Clean(path) != path:
			errs = append(errs, field.Invalid(p.Index(i), path, "not clean: use "+filepath.Clean(path)))
		case seen[path]:
			errs = append(errs, field.Duplicate(p.Index(i), path))
		}
		seen[path] = true
	}
	return errs
}

// validateTaggedImage wants an image reference, like example, with a tag
// or a digest: without one, the node runs whatever :latest it holds.
func validateTaggedImage(p *field.Path, image, example string) field.ErrorList {
	if _, err := name.ParseReference(image); err != nil {
		return field.ErrorList{field.Invalid(p, image, "want an image reference like "+example)}
	}
	if last := image[strings.LastIndex(image, "/")+1:]; !strings.ContainsAny(last, ":@") {
		return field.ErrorList{field.Invalid(p, image, "name a tag or a digest: without one the kubelet runs whatever :latest is on the node")}
	}
	return nil
}
