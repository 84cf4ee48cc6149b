package config

import (
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// KindWorkerConfiguration is the kind of the document that describes a
// worker node joining an existing cluster.
const KindWorkerConfiguration = "WorkerConfiguration"

// The defaults of a worker join's waits, kubeadm's.
const (
	DefaultDiscoveryTimeout    = 5 * time.Minute
	DefaultTLSBootstrapTimeout = 5 * time.Minute
)

// WorkerConfiguration describes a worker node that joins a cluster made by
// `kubeboot init`: this node's identity, files and kubelet, and how it
// finds and trusts the cluster. It is the only input of `kubeboot join`
// without --control-plane; the command line's endpoint, --token,
// --discovery-token-ca-cert-hash, --discovery-file and --node-name set the
// same fields. Everything cluster-wide (the kubelet's cluster DNS,
// authentication, TLS settings...) comes from the cluster.
type WorkerConfiguration struct {
	metav1.TypeMeta `json:",inline"`

	// Node is this node's identity.
	Node WorkerRegistration `json:"node"`
	// Discovery says how to find the cluster and trust its CA.
	Discovery Discovery `json:"discovery"`
	// Certificates says where the cluster CA goes on this node.
	Certificates WorkerCertificates `json:"certificates"`
	// Paths are the node directories kubeboot writes to.
	Paths Paths `json:"paths"`
	// Kubelet configures the node's kubelet: its configuration file, CRI
	// socket and this node's own KubeletConfiguration fields.
	Kubelet WorkerKubelet `json:"kubelet"`
	// Timeouts bound the join's waits.
	Timeouts WorkerTimeouts `json:"timeouts"`
}

// WorkerKubelet is what a worker's kubelet-config phase writes for the
// node's kubelet. Unlike a control-plane node's, it has no certDir: the
// worker's kubelet writes its kubelet.conf itself, naming its own
// certificates.
type WorkerKubelet struct {
	// ConfigFile is the KubeletConfiguration file the kubelet reads (--config).
	ConfigFile string `json:"configFile,omitempty"`
	// ContainerRuntimeEndpoint is the CRI socket of the container runtime.
	ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint,omitempty"`
	// ExtraConfig holds this node's own KubeletConfiguration fields, over
	// the cluster's.
	ExtraConfig map[string]any `json:"extraConfig,omitempty"`
}

// WorkerRegistration is the identity of a worker node.
type WorkerRegistration struct {
	// Name is the node name (default: the lower-cased host name); the
	// kubelet registers the Node under it (--hostname-override).
	Name string `json:"name,omitempty"`
	// Address is the node's IP, which the kubelet reports (--node-ip);
	// empty lets the kubelet choose, as kubeadm does.
	Address string `json:"address,omitempty"`
	// SecondaryAddress is the node's IP of the other family, on a
	// dual-stack cluster: the kubelet reports both as the Node's
	// addresses (--node-ip=address,secondaryAddress). It needs address.
	SecondaryAddress string `json:"secondaryAddress,omitempty"`
	// Labels are the Node's own labels, which the kubelet sets itself
	// (--node-labels). The kubelet may set no label under kubernetes.io or
	// k8s.io but those of node.kubernetes.io, kubelet.kubernetes.io and
	// the well-known topology, OS, architecture and instance-type labels.
	Labels map[string]string `json:"labels,omitempty"`
	// Taints are the Node's taints, which the kubelet registers it with
	// (registerWithTaints), so that no pod lands on it before them.
	Taints []NodeTaint `json:"taints,omitempty"`
}

// Discovery is how a worker finds the cluster and trusts its CA: a
// bootstrap token with the CA's pins, or a discovery file.
type Discovery struct {
	// APIServerEndpoint is the host:port of the API server to discover
	// the cluster through, with Token.
	APIServerEndpoint string `json:"apiServerEndpoint,omitempty"`
	// Token is the bootstrap token "<id>.<secret>": with CACertHashes it
	// verifies cluster-info, and it is the kubelet's TLS bootstrap
	// credential. It is a secret: nothing prints it.
	Token string `json:"token,omitempty"`
	// CACertHashes pin the cluster CA: sha256:<hex> of its
	// SubjectPublicKeyInfo; the CA must match one of them.
	CACertHashes []string `json:"caCertHashes,omitempty"`
	// File is a kubeconfig with the cluster's CA and server (and, in its
	// user, the token for the TLS bootstrap), as `kubeboot token create
	// --discovery-file` writes it; instead of APIServerEndpoint and
	// CACertHashes.
	File string `json:"file,omitempty"`
}

// WorkerCertificates is where a worker keeps the cluster CA.
type WorkerCertificates struct {
	// Dir holds ca.crt, with which the kubelet authenticates clients.
	Dir string `json:"dir,omitempty"`
}

// WorkerTimeouts bound a worker join's waits.
type WorkerTimeouts struct {
	// Discovery bounds the discovery of the cluster, which waits for the
	// bootstrapsigner to sign cluster-info with the token.
	Discovery metav1.Duration `json:"discovery,omitempty"`
	// TLSBootstrap bounds the wait for the kubelet's TLS bootstrap (its
	// kubelet.conf) and then for its Node to be Ready.
	TLSBootstrap metav1.Duration `json:"tlsBootstrap,omitempty"`
}

// WorkerFlags are a worker's join's command line: each setting it gives
// wins over the WorkerConfiguration's.
type WorkerFlags struct {
	// Discovery's set fields replace the configuration's.
	Discovery Discovery
	// NodeName, when set, replaces node.name.
	NodeName string
}

// apply sets what the flags give over w.
func (f WorkerFlags) apply(w *WorkerConfiguration) {
	w.Discovery.Set(f.Discovery)
	if f.NodeName != "" {
		w.Node.Name = f.NodeName
	}
}

// empty says that d sets nothing.
func (d Discovery) empty() bool {
	return d.APIServerEndpoint == "" && d.Token == "" && len(d.CACertHashes) == 0 && d.File == ""
}

// Set replaces each field of d that given sets.
func (d *Discovery) Set(given Discovery) {
	if given.APIServerEndpoint != "" {
		d.APIServerEndpoint = given.APIServerEndpoint
	}
	if given.Token != "" {
		d.Token = given.Token
	}
	if len(given.CACertHashes) > 0 {
		d.CACertHashes = given.CACertHashes
	}
	if given.File != "" {
		d.File = given.File
	}
}

// loadWorker decodes the WorkerConfiguration document doc of file (without
// a document, it is empty), sets env's worker flags over it, then defaults
// and validates it. Without the flags, it may leave its discovery out.
func loadWorker(file string, doc *yaml.Node, env Env) (*WorkerConfiguration, error) {
	w := &WorkerConfiguration{}
	var errs field.ErrorList
	if doc != nil {
		if err := decode(file, doc, w); err != nil {
			return nil, err
		}
		errs = workerExplicitZeros(w, doc)
	}
	if env.Worker != nil {
		env.Worker.apply(w)
	}
	SetWorkerDefaults(w, env.Host)
	for _, e := range ValidateWorker(w) {
		if env.Worker != nil || e.Field != "discovery" || e.Type != field.ErrorTypeRequired {
			errs = append(errs, e)
		}
	}
	if file == "" {
		file = "(command line)" // every setting came from the join's flags
	}
	if err := validated(file, doc, errs); err != nil {
		return nil, err
	}
	return w, nil
}

// SetWorkerDefaults fills every empty field of w that has a default; host
// supplies the node name. The CA pins are lower-cased.
func SetWorkerDefaults(w *WorkerConfiguration, host Host) {
	w.APIVersion, w.Kind = APIVersion, KindWorkerConfiguration
	setString(&w.Node.Name, host.Name)
	setString(&w.Certificates.Dir, DefaultCertificatesDir)
	setString(&w.Paths.ManifestsDir, DefaultManifestsDir)
	setString(&w.Paths.KubeconfigDir, DefaultKubeconfigDir)
	setString(&w.Kubelet.ConfigFile, DefaultKubeletConfigFile)
	setString(&w.Kubelet.ContainerRuntimeEndpoint, DefaultCRIEndpoint)
	setDuration(&w.Timeouts.Discovery, DefaultDiscoveryTimeout)
	setDuration(&w.Timeouts.TLSBootstrap, DefaultTLSBootstrapTimeout)
	for i, h := range w.Discovery.CACertHashes {
		w.Discovery.CACertHashes[i] = strings.ToLower(strings.TrimSpace(h))
	}
}

// workerExplicitZeros refuses a timeout written as zero, which would
// otherwise silently become the default.
func workerExplicitZeros(w *WorkerConfiguration, doc *yaml.Node) field.ErrorList {
	var errs field.ErrorList
	for _, z := range []struct {
		path string
		zero bool
	}{
		{"timeouts.discovery", w.Timeouts.Discovery.Duration == 0},
		{"timeouts.tlsBootstrap", w.Timeouts.TLSBootstrap.Duration == 0},
	} {
		if v := valueAt(doc, z.path); z.zero && v != nil && v.Kind == yaml.ScalarNode && !isNull(v) {
			errs = append(errs, field.Invalid(field.NewPath(z.path), v.Value, "must be positive, like 5m; leave the field out for the default"))
		}
	}
	return errs
}

// ValidateWorker checks a defaulted WorkerConfiguration and reports every
// problem at once, each with its field path. It never quotes the token.
func ValidateWorker(w *WorkerConfiguration) field.ErrorList {
	errs := dnsSubdomain(field.NewPath("node", "name"), w.Node.Name)
	if a := w.Node.Address; a != "" {
		ip := net.ParseIP(a)
		p := field.NewPath("node", "address")
		switch {
		case ip == nil:
			errs = append(errs, field.Invalid(p, a, "want an IP address of this node, or leave it out and the kubelet chooses"))
		case ip.IsUnspecified() || ip.IsLoopback():
			errs = append(errs, field.Invalid(p, a, "the kubelet refuses an unspecified or loopback node IP: use an address other nodes reach this node at"))
		}
	}
	errs = append(errs, validateSecondaryAddress(field.NewPath("node"), "address", w.Node.Address, w.Node.SecondaryAddress)...)
	errs = append(errs, validateNodeRegistration(field.NewPath("node"), w.Node.Labels, w.Node.Taints)...)
	errs = append(errs, validateDiscovery(field.NewPath("discovery"), w.Discovery)...)
	errs = append(errs, absolutePath(field.NewPath("certificates", "dir"), w.Certificates.Dir)...)
	errs = append(errs, absolutePath(field.NewPath("paths", "manifestsDir"), w.Paths.ManifestsDir)...)
	errs = append(errs, absolutePath(field.NewPath("paths", "kubeconfigDir"), w.Paths.KubeconfigDir)...)
	errs = append(errs, absolutePath(field.NewPath("kubelet", "configFile"), w.Kubelet.ConfigFile)...)
	errs = append(errs, validateCRIEndpoint(w.Kubelet.ContainerRuntimeEndpoint)...)
	extra := field.NewPath("kubelet", "extraConfig")
	kc, kubeletErrs := decodeKubeletExtraConfig(extra, w.Kubelet.ExtraConfig)
	errs = append(errs, kubeletErrs...)
	errs = append(errs, registerWithTaintsTwice(w.Node.Taints, extra, w.Kubelet.ExtraConfig)...)
	// A worker has no security section: its kubelet's guarantees hold.
	for _, d := range kubeletDowngrades(extra, kc) {
		errs = append(errs, field.Invalid(d.path, d.value, d.breaks+": kubeboot refuses this downgrade on a worker; remove the override (see docs/security.md)"))
	}
	errs = append(errs, validateOwnedDirs(w.ownedPaths())...)
	for _, t := range []struct {
		name string
		d    time.Duration
	}{{"discovery", w.Timeouts.Discovery.Duration}, {"tlsBootstrap", w.Timeouts.TLSBootstrap.Duration}} {
		if t.d <= 0 {
			errs = append(errs, field.Invalid(field.NewPath("timeouts", t.name), t.d.String(), "must be positive, like 5m"))
		}
	}
	return errs
}

// tokenPattern is the format of a bootstrap token, as package
// bootstraptoken parses it (config may not import it: they share a layer);
// a test keeps the two in step.
var tokenPattern = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)

// caHashPattern is a CA pin as `kubeboot token create` prints it.
var caHashPattern = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
})

// validateDiscovery accepts a token with an endpoint and CA pins, or a
// discovery file (with an optional token for the TLS bootstrap).
func validateDiscovery(p *field.Path, d Discovery) field.ErrorList {
	var errs field.ErrorList
	if d.Token != "" && !tokenPattern.MatchString(d.Token) {
		errs = append(errs, field.Invalid(p.Child("token"), field.OmitValueType{},
			"not a bootstrap token (--token): want 6 and 16 characters of [a-z0-9], joined by a dot, as `kubeboot token create` prints it"))
	}
	for i, h := range d.CACertHashes {
		const want = "want sha256:<64 hex digits> (--discovery-token-ca-cert-hash), as `kubeboot token create --print-join-command` prints it"
		switch {
		case tokenWithin.MatchString(h):
			errs = append(errs, field.Invalid(p.Child("caCertHashes").Index(i), Hidden, "holds a bootstrap token, which goes in --token: "+want))
		case !caHashPattern().MatchString(h):
			errs = append(errs, field.Invalid(p.Child("caCertHashes").Index(i), h, want))
		}
	}
	if d.File != "" {
		errs = append(errs, absolutePath(p.Child("file"), d.File)...)
		if d.APIServerEndpoint != "" {
			errs = append(errs, field.Forbidden(p.Child("apiServerEndpoint"), "a discovery file (--discovery-file) names the endpoint itself: leave out the endpoint"))
		}
		if len(d.CACertHashes) > 0 {
			errs = append(errs, field.Forbidden(p.Child("caCertHashes"), "a discovery file (--discovery-file) carries the CA itself: leave out --discovery-token-ca-cert-hash"))
		}
		return errs
	}
	if d.APIServerEndpoint == "" && d.Token == "" && len(d.CACertHashes) == 0 {
		return append(errs, field.Required(p, "pass ENDPOINT --token T --discovery-token-ca-cert-hash sha256:H, as `kubeboot token create --print-join-command` prints them, or --discovery-file F"))
	}
	if d.APIServerEndpoint == "" {
		errs = append(errs, field.Required(p.Child("apiServerEndpoint"), "the host:port of the API server (ENDPOINT), as the join command names it"))
	} else if tokenWithin.MatchString(d.APIServerEndpoint) {
		errs = append(errs, field.Invalid(p.Child("apiServerEndpoint"), Hidden, "holds a bootstrap token, which goes in --token: want host:port (ENDPOINT), like 10.0.0.10:6443"))
	} else if _, port, err := net.SplitHostPort(d.APIServerEndpoint); err != nil || port == "" {
		errs = append(errs, field.Invalid(p.Child("apiServerEndpoint"), d.APIServerEndpoint, "want host:port, like 10.0.0.10:6443"))
	} else {
		errs = append(errs, validateEndpoint(p.Child("apiServerEndpoint"), d.APIServerEndpoint)...)
	}
	if d.Token == "" {
		errs = append(errs, field.Required(p.Child("token"), "the bootstrap token (--token) from `kubeboot token create` on a control-plane node"))
	}
	if len(d.CACertHashes) == 0 {
		errs = append(errs, field.Required(p.Child("caCertHashes"),
			"pin the cluster CA with --discovery-token-ca-cert-hash sha256:<hex>, as `kubeboot token create --print-join-command` prints it: without a pin, any server could pose as the cluster"))
	}
	return errs
}

// ownedPaths is w's paths as the part of a ClusterConfiguration that the
// table of kubeboot's own paths (validateOwnedDirs) reads: the node's
// name and address, the certificates, kubeconfig and manifest
// directories, and the kubelet. ValidateWorker alone uses it; a worker's
// join holds its WorkerConfiguration, never a ClusterConfiguration.
func (w *WorkerConfiguration) ownedPaths() *ClusterConfiguration {
	c := New()
	c.Node = NodeRegistration{Name: w.Node.Name, AdvertiseAddress: w.Node.Address}
	c.Certificates.Dir = w.Certificates.Dir
	c.Paths = w.Paths
	c.Kubelet = Kubelet{ConfigFile: w.Kubelet.ConfigFile, ContainerRuntimeEndpoint: w.Kubelet.ContainerRuntimeEndpoint, ExtraConfig: w.Kubelet.ExtraConfig}
	return c
}

// KubeconfigPath returns the node path of a kubeconfig file.
func (w *WorkerConfiguration) KubeconfigPath(name string) string {
	return filepath.Join(w.Paths.KubeconfigDir, name)
}

// CAPath returns the node path of the cluster CA certificate.
func (w *WorkerConfiguration) CAPath() string {
	return filepath.Join(w.Certificates.Dir, CertCA+".crt")
}
