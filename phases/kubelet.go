package phases

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/workflow"
)

// KubeletConfig writes the KubeletConfiguration that points the node's
// kubelet at the manifest directory, as kubeadm's kubelet-start does. The
// kubelet runs with --config <kubelet.configFile> --kubeconfig <kubelet.conf>.
var KubeletConfig = workflow.Phase[*Node]{
	Name:  "kubelet-config",
	Short: "Write the kubelet's configuration, pointing it at the manifest directory",
	Run: func(_ context.Context, s *Node) error {
		data, err := KubeletConfiguration(s.Config)
		if err != nil {
			return err
		}
		return s.Files.WriteFile(s.Config.Kubelet.ConfigFile, data, 0o600)
	},
}

// kubeletConfig holds the KubeletConfiguration (kubelet.config.k8s.io/v1beta1)
// fields kubeboot sets. The kubelet's own Go types would pull in most of
// component-base for a dozen fields.
type kubeletConfig struct {
	APIVersion               string            `json:"apiVersion"`
	Kind                     string            `json:"kind"`
	StaticPodPath            string            `json:"staticPodPath"`
	ContainerRuntimeEndpoint string            `json:"containerRuntimeEndpoint,omitempty"`
	Authentication           kubeletAuthn      `json:"authentication"`
	Authorization            map[string]string `json:"authorization"`
	ClusterDNS               []string          `json:"clusterDNS"`
	ClusterDomain            string            `json:"clusterDomain"`
	HealthzBindAddress       string            `json:"healthzBindAddress"`
	HealthzPort              int               `json:"healthzPort"`
	ReadOnlyPort             int               `json:"readOnlyPort"`
	RotateCertificates       bool              `json:"rotateCertificates"`
	// The serving certificate from the cluster CA, which the API server
	// verifies; without it the kubelet signs its own.
	TLSCertFile       string `json:"tlsCertFile,omitempty"`
	TLSPrivateKeyFile string `json:"tlsPrivateKeyFile,omitempty"`
	// A joining node's kubelet asks the cluster CA for its serving
	// certificate instead.
	ServerTLSBootstrap bool     `json:"serverTLSBootstrap,omitempty"`
	TLSMinVersion      string   `json:"tlsMinVersion,omitempty"`
	TLSCipherSuites    []string `json:"tlsCipherSuites,omitempty"`
	// This node's node.taints, which its Node is registered with.
	RegisterWithTaints []corev1.Taint `json:"registerWithTaints,omitempty"`
}

type kubeletAuthn struct {
	X509      map[string]string `json:"x509"`
	Webhook   map[string]bool   `json:"webhook"`
	Anonymous map[string]bool   `json:"anonymous"`
}

// KubeletConfiguration renders the file: kubeboot's settings, with
// node.taints as registerWithTaints, then kubelet.extraConfig applied as a
// JSON merge patch.
func KubeletConfiguration(c *config.ClusterConfiguration) ([]byte, error) {
	return renderKubeletConfiguration(c, false)
}

// nodeKubeletFields are the KubeletConfiguration fields that name this
// node's own addresses, files and sockets. The cluster-wide configuration
// leaves them out of kubelet.extraConfig: a node that binds its kubelet to
// one of its addresses, or keeps its volume plugins and pod logs elsewhere,
// does so for itself alone.
var nodeKubeletFields = []string{
	"address", "healthzBindAddress", "staticPodPath", "containerRuntimeEndpoint",
	"tlsCertFile", "tlsPrivateKeyFile", "volumePluginDir", "podLogsDir", "providerID",
}

// ClusterKubeletConfiguration renders the KubeletConfiguration that
// joining nodes start from (the kubelet-config ConfigMap's "kubelet" key):
// this node's, less what belongs to this node alone. The CRI socket is
// each node's own (kubeadm join writes its nodeRegistration.criSocket);
// the serving certificate kubeboot issues is this node's, and another node
// has none at that path, so with security.verifyKubeletServingCerts a
// joining kubelet asks for one (serverTLSBootstrap), which the CSR
// approver approves; node.taints are this node's; the static pod path and
// the client CA are kubeadm's fixed /etc/kubernetes/manifests and
// /etc/kubernetes/pki/ca.crt, which
// `kubeadm join` uses (kubeboot join sets its own); and the
// nodeKubeletFields of kubelet.extraConfig are left out. Everything else,
// the cluster DNS, the client CA, authentication and authorization, TLS
// settings and the rest of kubelet.extraConfig, is the cluster's.
func ClusterKubeletConfiguration(c *config.ClusterConfiguration) ([]byte, error) {
	return renderKubeletConfiguration(c, true)
}

func renderKubeletConfiguration(c *config.ClusterConfiguration, cluster bool) ([]byte, error) {
	kc := kubeletConfig{
		APIVersion:               "kubelet.config.k8s.io/v1beta1",
		Kind:                     "KubeletConfiguration",
		StaticPodPath:            c.Paths.ManifestsDir,
		ContainerRuntimeEndpoint: c.Kubelet.ContainerRuntimeEndpoint,
		Authentication: kubeletAuthn{
			X509:      map[string]string{"clientCAFile": c.CertPath(config.CertCA)},
			Webhook:   map[string]bool{"enabled": true},
			Anonymous: map[string]bool{"enabled": false},
		},
		Authorization:      map[string]string{"mode": "Webhook"},
		ClusterDNS:         []string{c.ClusterDNSIP()},
		ClusterDomain:      c.Networking.DNSDomain,
		HealthzBindAddress: "127.0.0.1",
		HealthzPort:        10248,
		RotateCertificates: true,
	}
	extra := c.Kubelet.ExtraConfig
	if cluster {
		kc.StaticPodPath, kc.ContainerRuntimeEndpoint = config.DefaultManifestsDir, ""
		kc.Authentication.X509["clientCAFile"] = filepath.Join(config.DefaultCertificatesDir, config.CertCA+".crt")
		kc.ServerTLSBootstrap = config.On(c.Security.VerifyKubeletServingCerts)
		extra = maps.Clone(extra)
		for _, name := range nodeKubeletFields {
			delete(extra, name)
		}
	} else {
		kc.RegisterWithTaints = config.CoreTaints(c.Node.Taints)
		if config.On(c.Security.VerifyKubeletServingCerts) {
			kc.TLSCertFile, kc.TLSPrivateKeyFile = c.CertPath(config.CertKubeletServer), c.KeyPath(config.CertKubeletServer)
		}
	}
	if config.On(c.Security.TLS.Enabled) {
		kc.TLSMinVersion, kc.TLSCipherSuites = c.Security.TLS.MinVersion, c.Security.TLS.CipherSuites
	}
	data, err := json.Marshal(kc)
	if err != nil {
		return nil, fmt.Errorf("encode kubelet configuration: %w", err)
	}
	if len(extra) > 0 {
		patch, err := json.Marshal(extra)
		if err != nil {
			return nil, fmt.Errorf("encode kubelet.extraConfig: %w", err)
		}
		if data, err = jsonpatch.MergePatch(data, patch); err != nil {
			return nil, fmt.Errorf("apply kubelet.extraConfig: %w", err)
		}
	}
	return yaml.JSONToYAML(data)
}
