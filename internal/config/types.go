// Package config owns kubeboot's versioned configuration API: the types of
// the kubeboot.io/v1alpha1 documents, their defaults, their validation and
// strict loading from YAML files.
package config

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// APIVersion is the group/version of every kubeboot configuration document.
const APIVersion = "kubeboot.io/v1alpha1"

// KindClusterConfiguration is the kind of the document that describes a
// control-plane node and its cluster.
const KindClusterConfiguration = "ClusterConfiguration"

// ClusterConfiguration describes one control-plane node and the cluster it
// belongs to. It is the only input of `kubeboot init`.
type ClusterConfiguration struct {
	metav1.TypeMeta `json:",inline"`

	// ClusterName names the cluster in the kubeconfigs.
	ClusterName string `json:"clusterName,omitempty"`
	// KubernetesVersion selects the control-plane images and flags (v1.34 to v1.36).
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// Node is this node's identity.
	Node NodeRegistration `json:"node"`
	// ControlPlaneEndpoint is a stable host or host:port for the API server,
	// typically a load balancer; empty means the node's advertise address.
	ControlPlaneEndpoint string `json:"controlPlaneEndpoint,omitempty"`
	// Networking holds the cluster's address ranges and DNS domain.
	Networking Networking `json:"networking"`
	// Etcd selects a local (stacked) or an external etcd.
	Etcd Etcd `json:"etcd"`
	// APIServer customises kube-apiserver.
	APIServer APIServer `json:"apiServer"`
	// ControllerManager customises kube-controller-manager.
	ControllerManager Component `json:"controllerManager"`
	// Scheduler customises kube-scheduler.
	Scheduler Component `json:"scheduler"`
	// Certificates controls where and how the PKI is generated.
	Certificates Certificates `json:"certificates"`
	// Paths are the node directories kubeboot writes to.
	Paths Paths `json:"paths"`
	// ImageRepository is the registry prefix of the control-plane images.
	ImageRepository string `json:"imageRepository,omitempty"`
	// PatchesDir holds patches applied to the rendered manifests; empty means none.
	PatchesDir string `json:"patchesDir,omitempty"`
	// Kubelet configures the node's kubelet, which runs the static pods.
	Kubelet Kubelet `json:"kubelet"`
	// Timeouts bound the waiting steps.
	Timeouts Timeouts `json:"timeouts"`
	// BootstrapToken is the token init creates for joining nodes when
	// BootstrapTokens is empty, and the default lifetime of every token.
	BootstrapToken BootstrapToken `json:"bootstrapToken"`
	// BootstrapTokens are the tokens init creates, as kubeadm's
	// InitConfiguration.bootstrapTokens; empty means one token, generated.
	BootstrapTokens []BootstrapTokenSpec `json:"bootstrapTokens,omitempty"`
	// CertificateKey, when set, makes init store the cluster secrets in
	// the kubeadm-certs Secret encrypted with it (upload-certs), for two
	// hours, as kubeadm's InitConfiguration.certificateKey: 64 hex digits,
	// as `kubeboot certs certificate-key` prints them. It is a secret:
	// nothing prints it.
	CertificateKey string `json:"certificateKey,omitempty"`
	// CSRApprover runs kubeboot's approver of kubelet serving certificates.
	CSRApprover CSRApprover `json:"csrApprover"`
	// Security is the control plane's hardening, all on by default.
	Security Security `json:"security"`
	// Addons are the cluster DNS and the Service proxy, on by default.
	Addons Addons `json:"addons"`
}

// Kubelet is what the kubelet-config phase writes for the node's kubelet,
// and where kubelet-finalize finds the client certificate it rotates.
type Kubelet struct {
	// ConfigFile is the KubeletConfiguration file the kubelet reads (--config).
	ConfigFile string `json:"configFile,omitempty"`
	// CertDir is the kubelet's certificate directory (--cert-dir), where it
	// keeps the client certificate it rotates, kubelet-client-current.pem.
	CertDir string `json:"certDir,omitempty"`
	// ContainerRuntimeEndpoint is the CRI socket of the container runtime.
	ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint,omitempty"`
	// ExtraConfig holds KubeletConfiguration fields that override the
	// generated ones, such as {failSwapOn: false}.
	ExtraConfig map[string]any `json:"extraConfig,omitempty"`
	// InstallCommand is what `kubeboot upgrade cluster` runs on each node,
	// before that node's upgrade, to install the kubelet of the new
	// release: the node's package manager, or a copy from a staged path.
	// Its environment holds KUBERNETES_VERSION, the release (like
	// v1.36.3). Empty: the kubelet is installed on every node beforehand.
	InstallCommand []string `json:"installCommand,omitempty"`
}

// NodeRegistration is the identity of the node kubeboot runs on.
type NodeRegistration struct {
	// Name is the node name (default: the lower-cased host name).
	Name string `json:"name,omitempty"`
	// AdvertiseAddress is the IP the API server and etcd advertise (default:
	// the address of the default route's interface, or 127.0.0.1 without one).
	AdvertiseAddress string `json:"advertiseAddress,omitempty"`
	// SecondaryAddress is the node's IP of the other family, on a
	// dual-stack cluster: the kubelet reports both as the Node's
	// addresses (--node-ip=advertiseAddress,secondaryAddress), so that
	// host-network pods get both. Empty: the Node has one address.
	SecondaryAddress string `json:"secondaryAddress,omitempty"`
	// ControlPlaneTaint makes init's mark-control-plane phase taint the
	// node node-role.kubernetes.io/control-plane:NoSchedule, so that
	// ordinary workloads stay off it. false keeps the taint off (and takes
	// it off), for single-node clusters that must run workloads. A *bool:
	// unset means on.
	ControlPlaneTaint *bool `json:"controlPlaneTaint,omitempty"`
	// Labels are the Node's own labels, which mark-control-plane applies
	// beside the control-plane label, as kubeadm's nodeRegistration's
	// node-labels; the same keys as a worker's are allowed.
	Labels map[string]string `json:"labels,omitempty"`
	// Taints are the Node's taints: the kubelet registers it with them
	// (registerWithTaints) and mark-control-plane keeps them, beside
	// node.controlPlaneTaint's.
	Taints []NodeTaint `json:"taints,omitempty"`
}

// Networking holds the cluster's address ranges. A dual-stack cluster lists
// one CIDR per family, comma-separated, as kubeadm does.
type Networking struct {
	// ServiceSubnet is the range of Service cluster IPs.
	ServiceSubnet string `json:"serviceSubnet,omitempty"`
	// PodSubnet is the range of pod IPs; empty means the CNI decides.
	PodSubnet string `json:"podSubnet,omitempty"`
	// DNSDomain is the cluster's DNS domain.
	DNSDomain string `json:"dnsDomain,omitempty"`
}

// Etcd selects exactly one of a local or an external etcd.
type Etcd struct {
	// Local runs etcd as a static pod on this node.
	Local *LocalEtcd `json:"local,omitempty"`
	// External points the API server at an etcd cluster managed elsewhere.
	External *ExternalEtcd `json:"external,omitempty"`
}

// LocalEtcd configures the stacked etcd member of this node.
type LocalEtcd struct {
	// DataDir is where etcd keeps its data.
	DataDir string `json:"dataDir,omitempty"`
	// SnapshotsDir is where `kubeboot etcd snapshot save` writes its
	// snapshots by default, and what `etcd snapshot list` and `prune`
	// manage. It must not lie in the data dir, which reset removes.
	SnapshotsDir string `json:"snapshotsDir,omitempty"`
	// ScheduledSnapshots, when set, saves snapshots into SnapshotsDir on
	// a schedule, and copies them to S3.
	ScheduledSnapshots *ScheduledSnapshots `json:"scheduledSnapshots,omitempty"`
	// ExtraArgs add, override or remove etcd flags.
	ExtraArgs []Arg `json:"extraArgs,omitempty"`
	// ServerCertSANs are extra SANs of etcd's serving certificate.
	ServerCertSANs []string `json:"serverCertSANs,omitempty"`
	// PeerCertSANs are extra SANs of etcd's peer certificate.
	PeerCertSANs []string `json:"peerCertSANs,omitempty"`
}

// ExternalEtcd is an etcd cluster that kubeboot does not run.
type ExternalEtcd struct {
	// Endpoints are the client URLs of the members.
	Endpoints []string `json:"endpoints"`
	// CAFile is the CA that signed the members' serving certificates.
	CAFile string `json:"caFile"`
	// CertFile is the client certificate of the API server.
	CertFile string `json:"certFile"`
	// KeyFile is the key of CertFile.
	KeyFile string `json:"keyFile"`
}

// Component customises one control-plane component's static pod.
type Component struct {
	// ExtraArgs add, override or remove command-line flags.
	ExtraArgs []Arg `json:"extraArgs,omitempty"`
	// ExtraVolumes mount more host paths into the pod.
	ExtraVolumes []HostPathMount `json:"extraVolumes,omitempty"`
	// ExtraEnv sets literal environment variables.
	ExtraEnv []EnvVar `json:"extraEnv,omitempty"`
}

// APIServer customises kube-apiserver.
type APIServer struct {
	Component `json:",inline"`
	// CertSANs are extra SANs of the API server's serving certificate.
	CertSANs []string `json:"certSANs,omitempty"`
	// BindPort is the secure port of the API server.
	BindPort int32 `json:"bindPort,omitempty"`
}

// Arg is one command-line flag override. A flag named like a default one
// replaces it; Remove drops the default flag instead. Several Args with the
// same name give a repeated flag.
type Arg struct {
	// Name is the flag name without leading dashes.
	Name string `json:"name"`
	// Value is the flag value.
	Value string `json:"value,omitempty"`
	// Remove drops the flag from the rendered command line.
	Remove bool `json:"remove,omitempty"`
}

// HostPathMount mounts a host path into a control-plane pod.
type HostPathMount struct {
	// Name is the volume name, unique in the pod.
	Name string `json:"name"`
	// HostPath is the path on the node.
	HostPath string `json:"hostPath"`
	// MountPath is the path inside the container.
	MountPath string `json:"mountPath"`
	// ReadOnly mounts the volume read-only.
	ReadOnly bool `json:"readOnly,omitempty"`
	// PathType is the kubelet's check on HostPath (default: none).
	PathType corev1.HostPathType `json:"pathType,omitempty"`
}

// EnvVar is a literal environment variable; references to API objects are
// deliberately impossible, because static pods may not use them.
type EnvVar struct {
	// Name is the variable's name.
	Name string `json:"name"`
	// Value is the variable's literal value.
	Value string `json:"value"`
}

// KeyAlgorithm names the key type of every generated key pair.
type KeyAlgorithm string

// The supported key algorithms.
const (
	ECDSAP256 KeyAlgorithm = "ecdsa-p256"
	ECDSAP384 KeyAlgorithm = "ecdsa-p384"
	RSA2048   KeyAlgorithm = "rsa-2048"
	RSA3072   KeyAlgorithm = "rsa-3072"
	RSA4096   KeyAlgorithm = "rsa-4096"
)

// KeyAlgorithms lists the supported key algorithms, default first.
var KeyAlgorithms = []KeyAlgorithm{ECDSAP256, ECDSAP384, RSA2048, RSA3072, RSA4096}

// Certificates controls the PKI.
type Certificates struct {
	// Dir holds the certificates and keys, in kubeadm's layout.
	Dir string `json:"dir,omitempty"`
	// KeyAlgorithm is the type of every generated key.
	KeyAlgorithm KeyAlgorithm `json:"keyAlgorithm,omitempty"`
	// CAValidity is the lifetime of the CAs.
	CAValidity metav1.Duration `json:"caValidity,omitempty"`
	// LeafValidity is the lifetime of every other certificate.
	LeafValidity metav1.Duration `json:"leafValidity,omitempty"`
	// RenewBefore is the renewal window: a certificate expiring within it is
	// not reused.
	RenewBefore metav1.Duration `json:"renewBefore,omitempty"`
	// CA is the cluster CA, made before the node, for a first node whose
	// disk holds none: `kubeboot config fleet` writes it into the first
	// control-plane node's file, so the other nodes' files can pin its
	// hash before that node is up. The certs phase writes it to dir when
	// dir holds no CA, and refuses a dir whose CA is another.
	CA *CertificateAuthority `json:"ca,omitempty"`
	// ScheduledRenewal, when set, has the node's systemd run `kubeboot
	// certs renew --due --restart` every interval: what is within
	// RenewBefore of its end is renewed, and the components that use it
	// restarted one at a time. Unset, renewal happens at each run of
	// `kubeboot bootstrap` (every boot of a provisioned node), `init
	// --renew` and `certs renew`.
	ScheduledRenewal *ScheduledRenewal `json:"scheduledRenewal,omitempty"`
}

// ScheduledRenewal is how often a control-plane node renews what is due:
// the kubeboot-certs-renew.timer that init and join write.
type ScheduledRenewal struct {
	// Interval is the time between two runs; the first is that long after
	// the timer starts. At least 1m (default 12h).
	Interval metav1.Duration `json:"interval,omitempty"`
}

// CertificateAuthority is a CA's certificate and private key, in PEM.
type CertificateAuthority struct {
	// Cert is the CA's certificate, PEM.
	Cert string `json:"cert"`
	// Key is the CA's private key, PEM.
	Key string `json:"key"`
}

// Paths are the node directories kubeboot writes to.
type Paths struct {
	// ManifestsDir is the kubelet's static pod path.
	ManifestsDir string `json:"manifestsDir,omitempty"`
	// KubeconfigDir holds the kubeconfig files.
	KubeconfigDir string `json:"kubeconfigDir,omitempty"`
}

// BootstrapToken configures the bootstrap token init creates, with which
// nodes join (kubeadm's default-node-token), when no BootstrapTokens are
// listed.
type BootstrapToken struct {
	// TTL is how long the token stays valid after init creates it, and the
	// default TTL of the listed BootstrapTokens and of `token create`.
	TTL metav1.Duration `json:"ttl,omitempty"`
}

// BootstrapTokenSpec is one bootstrap token init creates, as kubeadm's
// BootstrapToken: given (so that every node's configuration can hold it
// before the cluster exists), or generated when Token is empty.
type BootstrapTokenSpec struct {
	// Token is the token, "<id>.<secret>" of [a-z0-9]{6}.[a-z0-9]{16}, as
	// `kubeboot token generate` prints it; empty means init generates one.
	Token string `json:"token,omitempty"`
	// TTL is how long the token stays valid after init creates it
	// (default: bootstrapToken.ttl). A re-run keeps the expiry of a token
	// that exists.
	TTL *metav1.Duration `json:"ttl,omitempty"`
	// Description says what the token is for, stored in its Secret.
	Description string `json:"description,omitempty"`
	// Usages are what the token may be used for: signing (of cluster-info,
	// for discovery) and authentication (default: both).
	Usages []string `json:"usages,omitempty"`
	// Groups are the extra groups the token authenticates in, each
	// system:bootstrappers:... (default: kubeadm's default-node-token group).
	Groups []string `json:"groups,omitempty"`
}

// Timeouts bound the waiting steps.
type Timeouts struct {
	// ControlPlane bounds the wait for every component to become healthy,
	// and mark-control-plane's wait for the kubelet to register the Node.
	ControlPlane metav1.Duration `json:"controlPlane,omitempty"`
}
