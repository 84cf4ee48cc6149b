package templates

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"

	"sigs.k8s.io/yaml"
)

// The configuration files the API server reads beside its flags. Each is
// rendered from small local types rather than k8s.io/apiserver's, which
// would pull most of the API server into kubeboot for a few fields; the
// tests decode the results strictly with the schema the API server uses.

// EncryptionKeySize is the key size, in bytes, of the providers kubeboot
// generates keys for: secretbox takes exactly 32, aescbc up to 32.
const EncryptionKeySize = 32

// encryptionKeyName names the generated key inside the file; a later key
// rotation adds keys with other names.
const encryptionKeyName = "key1"

type encryptionConfiguration struct {
	APIVersion string               `json:"apiVersion"`
	Kind       string               `json:"kind"`
	Resources  []encryptionResource `json:"resources"`
}

type encryptionResource struct {
	Resources []string             `json:"resources"`
	Providers []encryptionProvider `json:"providers"`
}

// encryptionProvider holds exactly one provider. kms is kept opaque: users
// who rotate to a KMS plugin by hand keep a valid file.
type encryptionProvider struct {
	AESCBC    *keyProvider   `json:"aescbc,omitempty"`
	AESGCM    *keyProvider   `json:"aesgcm,omitempty"`
	Secretbox *keyProvider   `json:"secretbox,omitempty"`
	KMS       map[string]any `json:"kms,omitempty"`
	Identity  *struct{}      `json:"identity,omitempty"`
}

type keyProvider struct {
	Keys []encryptionKey `json:"keys"`
}

type encryptionKey struct {
	Name   string `json:"name"`
	Secret string `json:"secret"`
}

// name is the provider's type, as the API server's configuration names it.
func (p encryptionProvider) name() string {
	switch {
	case p.AESCBC != nil:
		return "aescbc"
	case p.AESGCM != nil:
		return "aesgcm"
	case p.Secretbox != nil:
		return "secretbox"
	case p.KMS != nil:
		return "kms"
	case p.Identity != nil:
		return "identity"
	}
	return ""
}

// EncryptionConfig renders an EncryptionConfiguration that encrypts Secrets
// with key under provider ("secretbox" or "aescbc"). identity comes second,
// so Secrets written before encryption was turned on stay readable.
func EncryptionConfig(provider string, key []byte) ([]byte, error) {
	if len(key) != EncryptionKeySize {
		return nil, fmt.Errorf("render encryption configuration: want a %d-byte key, got %d bytes", EncryptionKeySize, len(key))
	}
	keys := &keyProvider{Keys: []encryptionKey{{Name: encryptionKeyName, Secret: base64.StdEncoding.EncodeToString(key)}}}
	var first encryptionProvider
	switch provider {
	case "secretbox":
		first.Secretbox = keys
	case "aescbc":
		first.AESCBC = keys
	default:
		return nil, fmt.Errorf("render encryption configuration: unknown provider %q", provider)
	}
	return yaml.Marshal(encryptionConfiguration{
		APIVersion: "apiserver.config.k8s.io/v1",
		Kind:       "EncryptionConfiguration",
		Resources: []encryptionResource{{
			Resources: []string{"secrets"},
			Providers: []encryptionProvider{first, {Identity: &struct{}{}}},
		}},
	})
}

// CheckEncryptionConfig checks an existing EncryptionConfiguration well
// enough that the API server will start with it and that it covers
// Secrets, and returns the provider that encrypts new Secrets. Users may
// have edited the file to rotate keys, so any valid provider list passes.
// Errors never quote key material.
func CheckEncryptionConfig(data []byte) (string, error) {
	var c encryptionConfiguration
	if err := yaml.Unmarshal(data, &c); err != nil {
		return "", errors.New("not a YAML EncryptionConfiguration")
	}
	if c.APIVersion != "apiserver.config.k8s.io/v1" || c.Kind != "EncryptionConfiguration" {
		return "", fmt.Errorf("want apiVersion apiserver.config.k8s.io/v1 and kind EncryptionConfiguration, got %q %q", c.APIVersion, c.Kind)
	}
	first := ""
	for i, r := range c.Resources {
		if len(r.Providers) == 0 {
			return "", fmt.Errorf("resources[%d] has no providers", i)
		}
		for j, p := range r.Providers {
			if p.name() == "" {
				return "", fmt.Errorf("resources[%d].providers[%d] names no known provider", i, j)
			}
			if err := checkKeys(p); err != nil {
				return "", fmt.Errorf("resources[%d].providers[%d].%s: %w", i, j, p.name(), err)
			}
		}
		if first == "" && slices.ContainsFunc(r.Resources, coversSecrets) {
			first = r.Providers[0].name()
		}
	}
	if first == "" {
		return "", errors.New("no resources entry covers secrets")
	}
	return first, nil
}

// coversSecrets reports whether a resources entry names Secrets, directly
// or through the wildcards the API server accepts.
func coversSecrets(resource string) bool {
	return resource == "secrets" || resource == "*." || resource == "*.*"
}

// checkKeys wants at least one key, each of a size the provider accepts.
func checkKeys(p encryptionProvider) error {
	var keys *keyProvider
	sizes := []int{16, 24, 32}
	switch {
	case p.Secretbox != nil:
		keys, sizes = p.Secretbox, []int{32}
	case p.AESCBC != nil:
		keys = p.AESCBC
	case p.AESGCM != nil:
		keys = p.AESGCM
	default:
		return nil
	}
	if len(keys.Keys) == 0 {
		return errors.New("no keys")
	}
	for i, k := range keys.Keys {
		raw, err := base64.StdEncoding.DecodeString(k.Secret)
		switch {
		case k.Name == "":
			return fmt.Errorf("keys[%d] has no name", i)
		case err != nil:
			return fmt.Errorf("keys[%d] (%s): the secret is not base64", i, k.Name)
		case !slices.Contains(sizes, len(raw)):
			return fmt.Errorf("keys[%d] (%s): the secret is %d bytes, want %v", i, k.Name, len(raw), sizes)
		}
	}
	return nil
}

type auditPolicy struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	OmitStages []string    `json:"omitStages"`
	Rules      []auditRule `json:"rules"`
}

type auditRule struct {
	Level           string           `json:"level"`
	Verbs           []string         `json:"verbs,omitempty"`
	Resources       []groupResources `json:"resources,omitempty"`
	NonResourceURLs []string         `json:"nonResourceURLs,omitempty"`
}

type groupResources struct {
	Group     string   `json:"group"`
	Resources []string `json:"resources"`
}

// AuditPolicy renders kubeboot's audit policy. The first matching rule
// wins, so the order matters: health checks are not logged at all;
// anything touching Secrets, ConfigMaps or tokens is logged without bodies,
// which would leak the secrets; other writes are logged with their request
// bodies; everything else with its metadata.
func AuditPolicy() ([]byte, error) {
	return yaml.Marshal(auditPolicy{
		APIVersion: "audit.k8s.io/v1",
		Kind:       "Policy",
		// One event per request, written when the response is complete.
		OmitStages: []string{"RequestReceived"},
		Rules: []auditRule{
			{Level: "None", NonResourceURLs: []string{"/healthz*", "/livez*", "/readyz*"}},
			{Level: "Metadata", Resources: []groupResources{
				{Group: "", Resources: []string{"configmaps", "secrets", "serviceaccounts/token"}},
				{Group: "authentication.k8s.io", Resources: []string{"tokenreviews"}},
			}},
			{Level: "Request", Verbs: []string{"create", "delete", "deletecollection", "patch", "update"}},
			{Level: "Metadata"},
		},
	})
}

type admissionConfiguration struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Plugins    []admissionPlugin `json:"plugins"`
}

type admissionPlugin struct {
	Name          string         `json:"name"`
	Configuration map[string]any `json:"configuration"`
}

// AdmissionConfig renders the AdmissionConfiguration of the EventRateLimit
// plugin. Events are best effort: a rejected event is dropped by its
// sender. A server-wide bucket keeps an event storm from loading etcd, and
// a bucket per namespace keeps one namespace from using it all up.
func AdmissionConfig() ([]byte, error) {
	return yaml.Marshal(admissionConfiguration{
		APIVersion: "apiserver.config.k8s.io/v1",
		Kind:       "AdmissionConfiguration",
		Plugins: []admissionPlugin{{
			Name: "EventRateLimit",
			Configuration: map[string]any{
				"apiVersion": "eventratelimit.admission.k8s.io/v1alpha1",
				"kind":       "Configuration",
				"limits": []map[string]any{
					{"type": "Server", "qps": 100, "burst": 400},
					{"type": "Namespace", "qps": 50, "burst": 100, "cacheSize": 2000},
				},
			},
		}},
	})
}

type authenticationConfiguration struct {
	APIVersion string        `json:"apiVersion"`
	Kind       string        `json:"kind"`
	Anonymous  anonymousAuth `json:"anonymous"`
}

type anonymousAuth struct {
	Enabled    bool                `json:"enabled"`
	Conditions []map[string]string `json:"conditions"`
}

// AuthenticationConfig renders an AuthenticationConfiguration that lets
// anonymous requests reach the health endpoints and the cluster-info
// ConfigMap only: the kubelet's probes and load balancers' checks carry no
// credentials, and neither does a joining node's discovery, which reads
// cluster-info before it trusts the API server. A condition is an exact
// match on the URL path, so no other object, list or watch is reachable;
// RBAC (the kubeadm:bootstrap-signer-clusterinfo Role) then allows GET of
// cluster-info only. The API server accepts apiserver.config.k8s.io/v1 with
// anonymous conditions from v1.34 on.
func AuthenticationConfig() ([]byte, error) {
	return yaml.Marshal(authenticationConfiguration{
		APIVersion: "apiserver.config.k8s.io/v1",
		Kind:       "AuthenticationConfiguration",
		Anonymous: anonymousAuth{Enabled: true, Conditions: []map[string]string{
			{"path": "/healthz"}, {"path": "/livez"}, {"path": "/readyz"}, {"path": ClusterInfoPath},
		}},
	})
}
