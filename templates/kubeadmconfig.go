package templates

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/config"
)

// kubeadm's ClusterConfiguration (kubeadm.k8s.io/v1beta4), as far as a
// kubeboot configuration can say it. The fields carry kubeadm's names, so
// that `kubeadm join`, `kubeadm upgrade plan` and `kubeadm certs
// check-expiration` read the cluster from the kubeadm-config ConfigMap as
// they would read a kubeadm cluster. kubeadm's own Go types live in
// k8s.io/kubernetes, which kubeboot does not import.

// KubeadmAPIVersion is the group/version of the uploaded ClusterConfiguration.
const KubeadmAPIVersion = "kubeadm.k8s.io/v1beta4"

type kubeadmClusterConfiguration struct {
	APIVersion                  string            `json:"apiVersion"`
	Kind                        string            `json:"kind"`
	ClusterName                 string            `json:"clusterName"`
	KubernetesVersion           string            `json:"kubernetesVersion"`
	ControlPlaneEndpoint        string            `json:"controlPlaneEndpoint,omitempty"`
	CertificatesDir             string            `json:"certificatesDir"`
	ImageRepository             string            `json:"imageRepository"`
	EncryptionAlgorithm         string            `json:"encryptionAlgorithm"`
	CertificateValidityPeriod   metav1.Duration   `json:"certificateValidityPeriod"`
	CACertificateValidityPeriod metav1.Duration   `json:"caCertificateValidityPeriod"`
	Networking                  kubeadmNetworking `json:"networking"`
	Etcd                        kubeadmEtcd       `json:"etcd"`
	APIServer                   kubeadmAPIServer  `json:"apiServer"`
	ControllerManager           kubeadmComponent  `json:"controllerManager"`
	Scheduler                   kubeadmComponent  `json:"scheduler"`
	DNS                         kubeadmAddon      `json:"dns"`
	Proxy                       kubeadmAddon      `json:"proxy"`
}

type kubeadmNetworking struct {
	ServiceSubnet string `json:"serviceSubnet"`
	PodSubnet     string `json:"podSubnet,omitempty"`
	DNSDomain     string `json:"dnsDomain"`
}

type kubeadmEtcd struct {
	Local    *kubeadmLocalEtcd    `json:"local,omitempty"`
	External *kubeadmExternalEtcd `json:"external,omitempty"`
}

type kubeadmLocalEtcd struct {
	DataDir        string       `json:"dataDir"`
	ExtraArgs      []kubeadmArg `json:"extraArgs,omitempty"`
	ServerCertSANs []string     `json:"serverCertSANs,omitempty"`
	PeerCertSANs   []string     `json:"peerCertSANs,omitempty"`
}

type kubeadmExternalEtcd struct {
	Endpoints []string `json:"endpoints"`
	CAFile    string   `json:"caFile"`
	CertFile  string   `json:"certFile"`
	KeyFile   string   `json:"keyFile"`
}

type kubeadmComponent struct {
	ExtraArgs    []kubeadmArg           `json:"extraArgs,omitempty"`
	ExtraVolumes []kubeadmHostPathMount `json:"extraVolumes,omitempty"`
	ExtraEnvs    []kubeadmEnvVar        `json:"extraEnvs,omitempty"`
}

type kubeadmAPIServer struct {
	kubeadmComponent `json:",inline"`
	CertSANs         []string `json:"certSANs,omitempty"`
}

// kubeadmArg is v1beta4's flag override: a name/value list, where
// repeating a name repeats the flag.
type kubeadmArg struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type kubeadmHostPathMount struct {
	Name      string              `json:"name"`
	HostPath  string              `json:"hostPath"`
	MountPath string              `json:"mountPath"`
	ReadOnly  bool                `json:"readOnly,omitempty"`
	PathType  corev1.HostPathType `json:"pathType,omitempty"`
}

type kubeadmEnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// kubeadmAddon is the dns or proxy section: whether kubeboot's addon
// phase leaves the addon out, so that kubeadm's upgrade commands expect
// the addons kubeboot installs and only those.
type kubeadmAddon struct {
	Disabled bool `json:"disabled"`
}

// KubeadmClusterConfiguration renders cfg as kubeadm's ClusterConfiguration
// (kubeadm.k8s.io/v1beta4, YAML), for the kubeadm-config ConfigMap. What
// kubeadm cannot express is left out: extraArgs that remove a default flag
// (kubeadm can only add or override one) and kubeboot's security section,
// whose flags are part of the manifests rather than extraArgs.
func KubeadmClusterConfiguration(cfg *config.ClusterConfiguration) ([]byte, error) {
	kc := kubeadmClusterConfiguration{
		APIVersion:                  KubeadmAPIVersion,
		Kind:                        "ClusterConfiguration",
		ClusterName:                 cfg.ClusterName,
		KubernetesVersion:           cfg.KubernetesVersion,
		ControlPlaneEndpoint:        cfg.ControlPlaneEndpoint,
		CertificatesDir:             cfg.Certificates.Dir,
		ImageRepository:             cfg.ImageRepository,
		EncryptionAlgorithm:         strings.ToUpper(string(cfg.Certificates.KeyAlgorithm)),
		CertificateValidityPeriod:   cfg.Certificates.LeafValidity,
		CACertificateValidityPeriod: cfg.Certificates.CAValidity,
		Networking: kubeadmNetworking{
			ServiceSubnet: cfg.Networking.ServiceSubnet,
			PodSubnet:     cfg.Networking.PodSubnet,
			DNSDomain:     cfg.Networking.DNSDomain,
		},
		APIServer:         kubeadmAPIServer{kubeadmComponent: kubeadmComponentOf(cfg.APIServer.Component), CertSANs: cfg.APIServer.CertSANs},
		ControllerManager: kubeadmComponentOf(cfg.ControllerManager),
		Scheduler:         kubeadmComponentOf(cfg.Scheduler),
		DNS:               kubeadmAddon{Disabled: cfg.Addons.CoreDNS.Disabled},
		Proxy:             kubeadmAddon{Disabled: cfg.Addons.KubeProxy.Disabled},
	}
	if l := cfg.Etcd.Local; l != nil {
		kc.Etcd.Local = &kubeadmLocalEtcd{DataDir: l.DataDir, ExtraArgs: kubeadmArgs(l.ExtraArgs), ServerCertSANs: l.ServerCertSANs, PeerCertSANs: l.PeerCertSANs}
	}
	if x := cfg.Etcd.External; x != nil {
		kc.Etcd.External = &kubeadmExternalEtcd{Endpoints: x.Endpoints, CAFile: x.CAFile, CertFile: x.CertFile, KeyFile: x.KeyFile}
	}
	data, err := yaml.Marshal(kc)
	if err != nil {
		return nil, fmt.Errorf("render kubeadm ClusterConfiguration: %w", err)
	}
	return data, nil
}

func kubeadmComponentOf(c config.Component) kubeadmComponent {
	out := kubeadmComponent{ExtraArgs: kubeadmArgs(c.ExtraArgs)}
	for _, v := range c.ExtraVolumes {
		out.ExtraVolumes = append(out.ExtraVolumes, kubeadmHostPathMount(v))
	}
	for _, e := range c.ExtraEnv {
		out.ExtraEnvs = append(out.ExtraEnvs, kubeadmEnvVar(e))
	}
	return out
}

// kubeadmArgs keeps the overrides kubeadm can express: every arg but the
// removals.
func kubeadmArgs(args []config.Arg) []kubeadmArg {
	var out []kubeadmArg
	for _, a := range args {
		if !a.Remove {
			out = append(out, kubeadmArg{Name: a.Name, Value: a.Value})
		}
	}
	return out
}
