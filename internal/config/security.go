package config

import (
	"crypto/tls"
	"path/filepath"
	"regexp"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Security is kubeboot's hardening of the control plane. Everything is on
// by default; docs/security.md lists each choice, the CIS check it
// satisfies and how to turn it off. A switch is a *bool so that an unset
// switch can default to on while an explicit false stays false.
type Security struct {
	// EncryptionAtRest encrypts Secrets in etcd.
	EncryptionAtRest EncryptionAtRest `json:"encryptionAtRest"`
	// Audit makes the API server write an audit log.
	Audit Audit `json:"audit"`
	// TLS restricts the TLS versions and cipher suites every component serves.
	TLS TLS `json:"tls"`
	// AnonymousHealthChecksOnly lets anonymous requests reach the API
	// server's /livez, /readyz and /healthz, and the cluster-info ConfigMap
	// that node join discovery reads, and nothing else.
	AnonymousHealthChecksOnly *bool `json:"anonymousHealthChecksOnly,omitempty"`
	// VerifyKubeletServingCerts issues this node's kubelet serving
	// certificate from the cluster CA and makes the API server verify every
	// kubelet's serving certificate against that CA.
	VerifyKubeletServingCerts *bool `json:"verifyKubeletServingCerts,omitempty"`
	// EventRateLimit enables the EventRateLimit admission plugin.
	EventRateLimit *bool `json:"eventRateLimit,omitempty"`
	// DenyServiceExternalIPs enables the DenyServiceExternalIPs admission plugin.
	DenyServiceExternalIPs *bool `json:"denyServiceExternalIPs,omitempty"`
	// EtcdDataDirOwner is the user that owns the local etcd data directory
	// when it exists on the node; otherwise root owns it.
	EtcdDataDirOwner string `json:"etcdDataDirOwner,omitempty"`
	// AllowInsecure lists the guarantees (see Insecure) that an extraArgs
	// or kubelet.extraConfig override may break; validation refuses any
	// other such override.
	AllowInsecure []Insecure `json:"allowInsecure,omitempty"`
}

// EncryptionAtRest configures the API server's encryption of Secrets.
type EncryptionAtRest struct {
	// Enabled writes an EncryptionConfiguration and passes it to the API server.
	Enabled *bool `json:"enabled,omitempty"`
	// Provider encrypts new writes: secretbox or aescbc.
	Provider string `json:"provider,omitempty"`
}

// Audit configures the API server's audit log.
type Audit struct {
	// Enabled turns the audit log on.
	Enabled *bool `json:"enabled,omitempty"`
	// PolicyFile is a user audit policy on the node; empty means kubeboot's.
	PolicyFile string `json:"policyFile,omitempty"`
	// LogDir is the host directory of audit.log and its backups.
	LogDir string `json:"logDir,omitempty"`
	// MaxAge is how many days a rotated log is kept.
	MaxAge int32 `json:"maxAge,omitempty"`
	// MaxBackup is how many rotated logs are kept.
	MaxBackup int32 `json:"maxBackup,omitempty"`
	// MaxSize is the size in megabytes at which the log is rotated.
	MaxSize int32 `json:"maxSize,omitempty"`
}

// TLS restricts what the control plane's TLS servers accept.
type TLS struct {
	// Enabled passes MinVersion and CipherSuites to every component.
	Enabled *bool `json:"enabled,omitempty"`
	// MinVersion is VersionTLS12 or VersionTLS13.
	MinVersion string `json:"minVersion,omitempty"`
	// CipherSuites are the TLS 1.2 suites allowed, by Go name.
	CipherSuites []string `json:"cipherSuites,omitempty"`
}

// The encryption providers kubeboot generates keys for; both take 32-byte keys.
const (
	ProviderSecretbox = "secretbox"
	ProviderAESCBC    = "aescbc"
)

// The TLS versions kubeboot accepts, in the Kubernetes flag spelling.
const (
	TLSVersion12 = "VersionTLS12"
	TLSVersion13 = "VersionTLS13"
)

// Security defaults.
const (
	DefaultAuditLogDir      = "/var/log/kubernetes/audit"
	DefaultAuditMaxAge      = 30  // days; CIS 1.2.17 asks for at least 30
	DefaultAuditMaxBackup   = 10  // CIS 1.2.18 asks for at least 10
	DefaultAuditMaxSize     = 100 // megabytes; CIS 1.2.19 asks for at least 100
	DefaultEtcdDataDirOwner = "etcd"
)

// DefaultCipherSuites are ECDHE key exchange with an AEAD cipher only: no
// CBC, no static RSA key exchange. TLS 1.3 suites are not configurable in
// Go and are always the strong ones.
var DefaultCipherSuites = []string{
	"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
	"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
	"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
	"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
	"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
	"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
}

// The files kubeboot writes for the API server's hardening.
const (
	// FileEncryptionConfig lives in the certificates directory: it holds
	// a key and belongs in the same backups as the CA.
	FileEncryptionConfig     = "encryption-config.yaml"
	FileAuditPolicy          = "audit-policy.yaml"
	FileAdmissionConfig      = "admission-config.yaml"
	FileAuthenticationConfig = "authentication-config.yaml"
	FileAuditLog             = "audit.log"
	// apiServerConfigDir, under the kubeconfig directory, holds the API
	// server's policy files, which hold no secrets.
	apiServerConfigDir = "apiserver"
)

// On reports whether a switch is on. An unset switch is on, because every
// hardening is on by default.
func On(b *bool) bool { return b == nil || *b }

func setSecurityDefaults(s *Security) {
	for _, b := range []**bool{
		&s.EncryptionAtRest.Enabled, &s.Audit.Enabled, &s.TLS.Enabled,
		&s.AnonymousHealthChecksOnly, &s.VerifyKubeletServingCerts, &s.EventRateLimit, &s.DenyServiceExternalIPs,
	} {
		if *b == nil {
			on := true
			*b = &on
		}
	}
	setString(&s.EncryptionAtRest.Provider, ProviderSecretbox)
	setString(&s.Audit.LogDir, DefaultAuditLogDir)
	setInt(&s.Audit.MaxAge, DefaultAuditMaxAge)
	setInt(&s.Audit.MaxBackup, DefaultAuditMaxBackup)
	setInt(&s.Audit.MaxSize, DefaultAuditMaxSize)
	setString(&s.TLS.MinVersion, TLSVersion12)
	if len(s.TLS.CipherSuites) == 0 {
		s.TLS.CipherSuites = slices.Clone(DefaultCipherSuites)
	}
	setString(&s.EtcdDataDirOwner, DefaultEtcdDataDirOwner)
}

func setInt(field *int32, value int32) {
	if *field == 0 {
		*field = value
	}
}

// userName is what useradd accepts by default.
var userName = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
})

func validateSecurity(p *field.Path, s Security) field.ErrorList {
	var errs field.ErrorList
	enc := p.Child("encryptionAtRest")
	if s.EncryptionAtRest.Provider != ProviderSecretbox && s.EncryptionAtRest.Provider != ProviderAESCBC {
		errs = append(errs, field.NotSupported(enc.Child("provider"), s.EncryptionAtRest.Provider, []string{ProviderSecretbox, ProviderAESCBC}))
	}
	audit := p.Child("audit")
	if s.Audit.PolicyFile != "" {
		errs = append(errs, absolutePath(audit.Child("policyFile"), s.Audit.PolicyFile)...)
	}
	errs = append(errs, absolutePath(audit.Child("logDir"), s.Audit.LogDir)...)
	for _, f := range []struct {
		name  string
		value int32
	}{{"maxAge", s.Audit.MaxAge}, {"maxBackup", s.Audit.MaxBackup}, {"maxSize", s.Audit.MaxSize}} {
		if f.value < 0 {
			errs = append(errs, field.Invalid(audit.Child(f.name), f.value, "must not be negative"))
		}
	}
	t := p.Child("tls")
	if s.TLS.MinVersion != TLSVersion12 && s.TLS.MinVersion != TLSVersion13 {
		errs = append(errs, field.NotSupported(t.Child("minVersion"), s.TLS.MinVersion, []string{TLSVersion12, TLSVersion13}))
	}
	for i, suite := range s.TLS.CipherSuites {
		if !slices.Contains(tls12CipherSuites(), suite) {
			errs = append(errs, field.Invalid(t.Child("cipherSuites").Index(i), suite,
				"not a TLS 1.2 cipher suite Go considers secure, like "+DefaultCipherSuites[0]))
		}
	}
	if !userName().MatchString(s.EtcdDataDirOwner) {
		errs = append(errs, field.Invalid(p.Child("etcdDataDirOwner"), s.EtcdDataDirOwner, "want a user name like etcd"))
	}
	return errs
}

// tls12CipherSuites lists the names of the TLS 1.2 suites of Go's secure
// list, which etcd and the Kubernetes components all accept.
func tls12CipherSuites() []string {
	var names []string
	for _, s := range tls.CipherSuites() {
		if slices.Contains(s.SupportedVersions, tls.VersionTLS12) {
			names = append(names, s.Name)
		}
	}
	return names
}

// EncryptionConfigPath is the node path of the API server's
// EncryptionConfiguration.
func (c *ClusterConfiguration) EncryptionConfigPath() string {
	return filepath.Join(c.Certificates.Dir, FileEncryptionConfig)
}

// APIServerConfigDir holds the policy files kubeboot writes for the API
// server: audit policy, admission and authentication configuration.
func (c *ClusterConfiguration) APIServerConfigDir() string {
	return filepath.Join(c.Paths.KubeconfigDir, apiServerConfigDir)
}

// AuditPolicyPath is the user's audit policy file, or kubeboot's.
func (c *ClusterConfiguration) AuditPolicyPath() string {
	if c.Security.Audit.PolicyFile != "" {
		return c.Security.Audit.PolicyFile
	}
	return filepath.Join(c.APIServerConfigDir(), FileAuditPolicy)
}

// AdmissionConfigPath is the node path of the API server's AdmissionConfiguration.
func (c *ClusterConfiguration) AdmissionConfigPath() string {
	return filepath.Join(c.APIServerConfigDir(), FileAdmissionConfig)
}

// AuthenticationConfigPath is the node path of the API server's
// AuthenticationConfiguration.
func (c *ClusterConfiguration) AuthenticationConfigPath() string {
	return filepath.Join(c.APIServerConfigDir(), FileAuthenticationConfig)
}

// AuditLogPath is the node path of the API server's audit log.
func (c *ClusterConfiguration) AuditLogPath() string {
	return filepath.Join(c.Security.Audit.LogDir, FileAuditLog)
}
