package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The static pod names of the control-plane components. Each manifest file
// is named after its component, with a .yaml extension.
const (
	NameEtcd              = "etcd"
	NameAPIServer         = "kube-apiserver"
	NameControllerManager = "kube-controller-manager"
	NameScheduler         = "kube-scheduler"
	// NameCSRApprover is kubeboot's own static pod, the approver of
	// kubelet serving certificates (see CSRApprover). It is no control-plane
	// component: the wait phase does not wait for it.
	NameCSRApprover = "kubeboot-csr-approver"
)

// The components' well-known ports. The API server's is apiServer.bindPort.
const (
	PortEtcdClient        = 2379
	PortEtcdPeer          = 2380
	PortEtcdMetrics       = 2381
	PortControllerManager = 10257
	PortScheduler         = 10259
	// PortCSRApprover is where the CSR approver serves /healthz and
	// /readyz, in plain HTTP on the loopback address.
	PortCSRApprover = 10270
	// PortEtcdSnapshots is where the snapshot pod serves /healthz and
	// /readyz, in plain HTTP on the loopback address.
	PortEtcdSnapshots = 10271
)

// ComponentNames lists the control-plane components in start order.
var ComponentNames = []string{NameEtcd, NameAPIServer, NameControllerManager, NameScheduler}

// StaticPodNames lists every static pod kubeboot may write: the
// components, then kubeboot's own pods.
var StaticPodNames = append(slices.Clone(ComponentNames), KubebootPods...)

// KubebootPods are kubeboot's own static pods, which run the kubeboot
// image and which the configuration turns on or off (KubebootPodEnabled).
// They are no control-plane components: nothing waits for them.
var KubebootPods = []string{NameCSRApprover, NameEtcdSnapshots}

// KubebootPodEnabled says whether this node runs kubeboot's pod name.
func (c *ClusterConfiguration) KubebootPodEnabled(name string) bool {
	switch name {
	case NameCSRApprover:
		return c.CSRApproverEnabled()
	case NameEtcdSnapshots:
		return c.ScheduledSnapshotsEnabled()
	}
	return false
}

// Default values of the configuration fields.
const (
	DefaultClusterName       = "kubernetes"
	DefaultKubernetesVersion = "v1.36.3"
	DefaultServiceSubnet     = "10.96.0.0/12"
	DefaultDNSDomain         = "cluster.local"
	DefaultEtcdDataDir       = "/var/lib/etcd"
	DefaultEtcdSnapshotsDir  = "/var/lib/kubeboot/etcd-snapshots"
	DefaultBindPort          = 6443
	DefaultCertificatesDir   = "/etc/kubernetes/pki"
	DefaultManifestsDir      = "/etc/kubernetes/manifests"
	DefaultKubeconfigDir     = "/etc/kubernetes"
	DefaultImageRepository   = "registry.k8s.io"
	DefaultCAValidity        = 10 * 365 * 24 * time.Hour
	DefaultLeafValidity      = 365 * 24 * time.Hour
	DefaultRenewBefore       = 30 * 24 * time.Hour
	// DefaultRenewalInterval is certificates.scheduledRenewal's interval.
	DefaultRenewalInterval = 12 * time.Hour
	// MinRenewalInterval is the shortest: each run reads every
	// certificate, and one that renews restarts the control plane.
	MinRenewalInterval       = time.Minute
	DefaultControlPlaneWait  = 4 * time.Minute
	DefaultBootstrapTokenTTL = 24 * time.Hour
	DefaultKubeletConfigFile = "/var/lib/kubelet/config.yaml"
	DefaultKubeletCertDir    = "/var/lib/kubelet/pki"
	DefaultCRIEndpoint       = "unix:///run/containerd/containerd.sock"
)

// Host is what defaulting needs to know about the machine and the
// kubeboot running on it.
type Host struct {
	// Name is the default node name.
	Name string
	// Address is the default advertise address.
	Address string
}

// DetectHost reads the host name and the address of the default route's
// interface, as kubeadm does, falling back to 127.0.0.1 without a route.
func DetectHost() Host {
	h := Host{Name: "localhost", Address: "127.0.0.1"}
	if name, err := os.Hostname(); err == nil && name != "" {
		h.Name = strings.ToLower(name)
	}
	if ip, err := utilnet.ChooseHostInterface(); err == nil && ip != nil && !ip.IsUnspecified() {
		h.Address = ip.String()
	}
	return h
}

// New returns a ClusterConfiguration with only its type set.
func New() *ClusterConfiguration {
	return &ClusterConfiguration{TypeMeta: metav1.TypeMeta{APIVersion: APIVersion, Kind: KindClusterConfiguration}}
}

// SetDefaults fills every empty field of c; host supplies the node's
// identity.
// It never overrides a value the user set.
func SetDefaults(c *ClusterConfiguration, host Host) {
	c.APIVersion, c.Kind = APIVersion, KindClusterConfiguration
	setString(&c.ClusterName, DefaultClusterName)
	setString(&c.KubernetesVersion, DefaultKubernetesVersion)
	c.KubernetesVersion = CanonicalKubernetesVersion(c.KubernetesVersion)
	setString(&c.Node.Name, host.Name)
	setString(&c.Node.AdvertiseAddress, host.Address)
	if c.Node.ControlPlaneTaint == nil {
		on := true
		c.Node.ControlPlaneTaint = &on
	}
	setString(&c.ImageRepository, DefaultImageRepository)
	setString(&c.Networking.ServiceSubnet, DefaultServiceSubnet)
	setString(&c.Networking.DNSDomain, DefaultDNSDomain)
	if c.Etcd.External == nil {
		if c.Etcd.Local == nil {
			c.Etcd.Local = &LocalEtcd{}
		}
		setString(&c.Etcd.Local.DataDir, DefaultEtcdDataDir)
		setString(&c.Etcd.Local.SnapshotsDir, DefaultEtcdSnapshotsDir)
		setScheduledSnapshotsDefaults(c.Etcd.Local.ScheduledSnapshots, c.ImageRepository)
	}
	if c.APIServer.BindPort == 0 {
		c.APIServer.BindPort = DefaultBindPort
	}
	setString(&c.Certificates.Dir, DefaultCertificatesDir)
	if c.Certificates.KeyAlgorithm == "" {
		c.Certificates.KeyAlgorithm = ECDSAP256
	}
	setDuration(&c.Certificates.CAValidity, DefaultCAValidity)
	setDuration(&c.Certificates.LeafValidity, DefaultLeafValidity)
	setDuration(&c.Certificates.RenewBefore, DefaultRenewBefore)
	if r := c.Certificates.ScheduledRenewal; r != nil {
		setDuration(&r.Interval, DefaultRenewalInterval)
	}
	setString(&c.Paths.ManifestsDir, DefaultManifestsDir)
	setString(&c.Paths.KubeconfigDir, DefaultKubeconfigDir)
	setDuration(&c.Timeouts.ControlPlane, DefaultControlPlaneWait)
	setDuration(&c.BootstrapToken.TTL, DefaultBootstrapTokenTTL)
	setBootstrapTokenDefaults(c)
	setString(&c.Kubelet.ConfigFile, DefaultKubeletConfigFile)
	setString(&c.Kubelet.CertDir, DefaultKubeletCertDir)
	setString(&c.Kubelet.ContainerRuntimeEndpoint, DefaultCRIEndpoint)
	setSecurityDefaults(&c.Security)
	setCSRApproverDefaults(c)
	setAddonDefaults(c)
}

func setString(field *string, value string) {
	if *field == "" {
		*field = value
	}
}

func setDuration(field *metav1.Duration, value time.Duration) {
	if field.Duration == 0 {
		field.Duration = value
	}
}

// ServiceSubnets returns the service CIDRs, one per IP family. It assumes a
// validated configuration.
func (c *ClusterConfiguration) ServiceSubnets() []*net.IPNet {
	return parseCIDRs(c.Networking.ServiceSubnet)
}

// PodSubnets returns the pod CIDRs, one per IP family. It assumes a
// validated configuration.
func (c *ClusterConfiguration) PodSubnets() []*net.IPNet {
	return parseCIDRs(c.Networking.PodSubnet)
}

func parseCIDRs(list string) []*net.IPNet {
	var nets []*net.IPNet
	for _, s := range splitList(list) {
		if _, n, err := net.ParseCIDR(s); err == nil {
			nets = append(nets, n)
		}
	}
	return nets
}

// splitList splits a comma-separated list, trimming blanks and dropping empty items.
func splitList(list string) []string {
	var out []string
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Marshal renders c as a YAML document, the format Load reads, with the
// fields in the order of the Go types rather than sorted.
func Marshal(c *ClusterConfiguration) ([]byte, error) {
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	// JSON is YAML, and a yaml.Node keeps the key order of its input.
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	blockStyle(&doc)
	if root := doc.Content[0]; root.Content[0].Value == "kind" {
		// TypeMeta declares kind first; manifests conventionally start with apiVersion.
		root.Content[0], root.Content[1], root.Content[2], root.Content[3] = root.Content[2], root.Content[3], root.Content[0], root.Content[1]
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	return out.Bytes(), nil
}

// blockStyle drops the flow style the JSON input gave every node, so the
// output reads like hand-written YAML.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// explicitZeros are the fields where a zero means "unset", so that a zero
// the user wrote would silently become the default. Each is refused
// instead. A zero renewBefore is refused too: it would reuse a certificate
// until it has expired, when the control plane is already down.
var explicitZeros = []struct {
	path    string
	isZero  func(c *ClusterConfiguration) bool
	message string
}{
	{"certificates.caValidity", func(c *ClusterConfiguration) bool { return c.Certificates.CAValidity.Duration == 0 },
		"must be positive, like 87600h; leave the field out for the default"},
	{"certificates.leafValidity", func(c *ClusterConfiguration) bool { return c.Certificates.LeafValidity.Duration == 0 },
		"must be positive, like 8760h; leave the field out for the default"},
	{"certificates.renewBefore", func(c *ClusterConfiguration) bool { return c.Certificates.RenewBefore.Duration == 0 },
		"0 would reuse a certificate until it has expired, and the control plane fails at that moment: use a window like 720h, or leave the field out for the default"},
	{"timeouts.controlPlane", func(c *ClusterConfiguration) bool { return c.Timeouts.ControlPlane.Duration == 0 },
		"must be positive, like 4m; leave the field out for the default"},
	{"bootstrapToken.ttl", func(c *ClusterConfiguration) bool { return c.BootstrapToken.TTL.Duration == 0 },
		"0 would be a token that never expires (kubeadm's meaning), a standing credential to join nodes: use a lifetime like 24h, or leave the field out for the default"},
	{"apiServer.bindPort", func(c *ClusterConfiguration) bool { return c.APIServer.BindPort == 0 },
		"not a port: use one between 1 and 65535, like 6443, or leave the field out for the default"},
}

// checkExplicitZeros reports the fields of explicitZeros that doc sets to
// zero. c is decoded from doc and not yet defaulted, so a zero in c is
// either absent from doc, or null (which stays "unset"), or written.
func checkExplicitZeros(c *ClusterConfiguration, doc *yaml.Node) field.ErrorList {
	var errs field.ErrorList
	for _, z := range explicitZeros {
		if !z.isZero(c) {
			continue
		}
		if v := valueAt(doc, z.path); v != nil && v.Kind == yaml.ScalarNode && !isNull(v) {
			errs = append(errs, field.Invalid(field.NewPath(z.path), v.Value, z.message))
		}
	}
	return errs
}
