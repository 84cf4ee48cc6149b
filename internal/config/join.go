package config

import (
	"net/url"
	"regexp"
	"sync"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// KindJoinConfiguration is the kind of the document that describes a
// control-plane node joining an existing cluster.
const KindJoinConfiguration = "JoinConfiguration"

// JoinConfiguration describes a control-plane node that joins a cluster
// made by `kubeboot init`. It has every field of a ClusterConfiguration,
// which must describe the same cluster (networking, certificates,
// security...) with this node's own identity, plus how to reach the
// cluster. It is the only input of `kubeboot join --control-plane`.
type JoinConfiguration struct {
	ClusterConfiguration `json:",inline"`
	// Join says how to reach the cluster being joined.
	Join Join `json:"join"`
}

// Join is how a joining node reaches the existing cluster.
type Join struct {
	// EtcdEndpoints are client URLs of existing etcd members; the new
	// member is added through them. Empty: those the cluster's etcd pods
	// show in their kubeadm.kubernetes.io/etcd.advertise-client-urls
	// annotation.
	EtcdEndpoints []string `json:"etcdEndpoints,omitempty"`
	// Discovery, when set, verifies the cluster as a worker's join does (a
	// bootstrap token and the CA's pins, or a discovery file): the
	// bundle's cluster CA must be the one discovery trusts.
	Discovery *Discovery `json:"discovery,omitempty"`
	// CertificateKey, when set, fetches the cluster secrets from the
	// kubeadm-certs Secret that init's upload-certs stored, with
	// join.discovery's bootstrap token, instead of a bundle. It is a
	// secret: nothing prints it.
	CertificateKey string `json:"certificateKey,omitempty"`
}

// loadJoin decodes, defaults and validates the JoinConfiguration document
// doc of file, with env's discovery settings over it; without a document,
// it is empty.
func loadJoin(file string, doc *yaml.Node, env Env) (*JoinConfiguration, error) {
	j := &JoinConfiguration{}
	var errs field.ErrorList
	if doc != nil {
		if err := decode(file, doc, j); err != nil {
			return nil, err
		}
		errs = checkExplicitZeros(&j.ClusterConfiguration, doc)
	}
	SetDefaults(&j.ClusterConfiguration, env.Host)
	if given := env.JoinDiscovery; given != nil && !given.empty() {
		if j.Join.Discovery == nil {
			j.Join.Discovery = &Discovery{}
		}
		j.Join.Discovery.Set(*given)
	}
	key := field.NewPath("join", "certificateKey")
	if env.JoinCertificateKey != "" {
		j.Join.CertificateKey, key = env.JoinCertificateKey, field.NewPath("--certificate-key")
	}
	errs = append(errs, Validate(&j.ClusterConfiguration)...)
	errs = append(errs, validateJoin(j, key)...)
	j.Kind = KindJoinConfiguration
	if err := validated(file, doc, errs); err != nil {
		return nil, err
	}
	return j, nil
}

// validateJoin checks what a join needs beyond a valid ClusterConfiguration;
// key names where join.certificateKey came from: that field, or the flag
// that set it.
func validateJoin(j *JoinConfiguration, key *field.Path) field.ErrorList {
	var errs field.ErrorList
	if j.ControlPlaneEndpoint == "" {
		errs = append(errs, field.Required(field.NewPath("controlPlaneEndpoint"), "a joining control-plane node reaches the cluster through its load balancer"))
	}
	if j.Etcd.Local == nil {
		errs = append(errs, field.Required(field.NewPath("etcd", "local"), "kubeboot joins control-plane nodes with a stacked etcd member only"))
	}
	p := field.NewPath("join", "etcdEndpoints")
	for i, ep := range j.Join.EtcdEndpoints {
		if u, err := url.Parse(ep); err != nil || u.Scheme != "https" || u.Host == "" {
			errs = append(errs, field.Invalid(p.Index(i), RedactedURL(ep), "want an https:// client URL"))
		}
	}
	if j.Join.Discovery != nil {
		errs = append(errs, validateDiscovery(field.NewPath("join", "discovery"), *j.Join.Discovery)...)
	}
	if j.Join.CertificateKey != "" {
		errs = append(errs, validateCertificateKey(key, j.Join.CertificateKey)...)
		if j.Join.Discovery == nil || j.Join.Discovery.Token == "" {
			errs = append(errs, field.Required(field.NewPath("join", "discovery", "token"), key.String()+" fetches the kubeadm-certs Secret with the bootstrap token: set join.discovery (token and caCertHashes, or --token and --discovery-token-ca-cert-hash)"))
		}
	}
	return errs
}

// certificateKeyPattern is a certificate key: an AES-256 key in hex.
var certificateKeyPattern = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[0-9a-f]{64}$`)
})

// validateCertificateKey checks a certificate key's form; the message
// never quotes the key.
func validateCertificateKey(p *field.Path, key string) field.ErrorList {
	if certificateKeyPattern().MatchString(key) {
		return nil
	}
	return field.ErrorList{field.Invalid(p, Hidden, "want 64 lowercase hex digits, as `kubeboot certs certificate-key` prints them")}
}
