package templates

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/internal/config"
)

// The hardening flags of each component, from cfg.Security. They are
// defaults like any other: extraArgs replace or remove them. docs/security.md
// names the CIS check behind each one.

// terminatedPodGCThreshold bounds how many terminated pods the cluster
// keeps. kube-bench only asks that it is set (CIS 1.3.1); the upstream
// default of 12500 keeps far more than a small cluster needs to debug.
const terminatedPodGCThreshold = "1000"

// apiServerSecurity returns the API server's hardening flags and the mounts
// of the files they name. The encryption configuration is in the
// certificates directory, which the API server mounts already.
func apiServerSecurity(cfg *config.ClusterConfiguration) ([]flag, []hostMount) {
	s := cfg.Security
	flags := []flag{
		{"profiling", "false"},
		{"service-account-extend-token-expiration", "false"},
		{"enable-admission-plugins", admissionPlugins(s)},
	}
	flags = append(flags, tlsFlags(s)...)
	var mounts []hostMount
	configDir := false
	if config.On(s.EncryptionAtRest.Enabled) {
		flags = append(flags, flag{"encryption-provider-config", cfg.EncryptionConfigPath()})
	}
	if config.On(s.Audit.Enabled) {
		flags = append(flags,
			flag{"audit-policy-file", cfg.AuditPolicyPath()},
			flag{"audit-log-path", cfg.AuditLogPath()},
			flag{"audit-log-maxage", strconv.Itoa(int(s.Audit.MaxAge))},
			flag{"audit-log-maxbackup", strconv.Itoa(int(s.Audit.MaxBackup))},
			flag{"audit-log-maxsize", strconv.Itoa(int(s.Audit.MaxSize))},
		)
		// The log directory is written, so it is mounted read-write; the
		// audit-log-dir name leaves kubeadm users' usual "audit-log" free.
		mounts = append(mounts, hostMount{name: "audit-log-dir", path: s.Audit.LogDir, pathType: corev1.HostPathDirectoryOrCreate})
		if s.Audit.PolicyFile != "" {
			mounts = append(mounts, hostMount{name: "audit-policy-file", path: s.Audit.PolicyFile, readOnly: true, pathType: corev1.HostPathFile})
		} else {
			configDir = true
		}
	}
	if config.On(s.EventRateLimit) {
		flags = append(flags, flag{"admission-control-config-file", cfg.AdmissionConfigPath()})
		configDir = true
	}
	if usesAuthenticationConfig(cfg) {
		flags = append(flags, flag{"authentication-config", cfg.AuthenticationConfigPath()})
		configDir = true
	}
	if config.On(s.VerifyKubeletServingCerts) {
		flags = append(flags, flag{"kubelet-certificate-authority", cfg.CertPath(config.CertCA)})
	}
	if configDir {
		// Like the PKI, the directory must exist rather than be created empty.
		mounts = append(mounts, hostMount{name: "apiserver-config", path: cfg.APIServerConfigDir(), readOnly: true, pathType: corev1.HostPathDirectory})
	}
	return flags, mounts
}

// usesAuthenticationConfig reports whether the API server gets kubeboot's
// authentication configuration. The structured configuration and
// --anonymous-auth exclude each other, and a user's own
// --authentication-config replaces ours.
func usesAuthenticationConfig(cfg *config.ClusterConfiguration) bool {
	return config.On(cfg.Security.AnonymousHealthChecksOnly) &&
		!hasArg(cfg.APIServer.ExtraArgs, "authentication-config") && !hasArg(cfg.APIServer.ExtraArgs, "anonymous-auth")
}

// File is a file the API server reads beside its flags.
type File struct {
	// Path is the node path.
	Path string
	// Data is the content.
	Data []byte
}

// APIServerFiles renders the policy files the API server's flags name:
// kubeboot's audit policy, the admission configuration and the
// authentication configuration, as cfg turns them on. The encryption
// configuration is not among them: it holds a random key, so it is created
// once and then kept (see EncryptionConfig).
func APIServerFiles(cfg *config.ClusterConfiguration) ([]File, error) {
	s := cfg.Security
	var renders []func() ([]byte, error)
	var paths []string
	if config.On(s.Audit.Enabled) && s.Audit.PolicyFile == "" {
		renders, paths = append(renders, AuditPolicy), append(paths, cfg.AuditPolicyPath())
	}
	if config.On(s.EventRateLimit) {
		renders, paths = append(renders, AdmissionConfig), append(paths, cfg.AdmissionConfigPath())
	}
	if usesAuthenticationConfig(cfg) {
		renders, paths = append(renders, AuthenticationConfig), append(paths, cfg.AuthenticationConfigPath())
	}
	files := make([]File, len(renders))
	for i, render := range renders {
		data, err := render()
		if err != nil {
			return nil, fmt.Errorf("render %q: %w", paths[i], err)
		}
		files[i] = File{Path: paths[i], Data: data}
	}
	return files, nil
}

// admissionPlugins is the value of --enable-admission-plugins: kubeadm's
// NodeRestriction and the plugins the configuration turns on. The API
// server runs them in its own fixed order, whatever the order here.
func admissionPlugins(s config.Security) string {
	plugins := []string{"NodeRestriction"}
	if config.On(s.EventRateLimit) {
		plugins = append(plugins, "EventRateLimit")
	}
	if config.On(s.DenyServiceExternalIPs) {
		plugins = append(plugins, "DenyServiceExternalIPs")
	}
	return strings.Join(plugins, ",")
}

// controllerManagerSecurity returns the controller manager's hardening flags.
func controllerManagerSecurity(cfg *config.ClusterConfiguration) []flag {
	flags := []flag{{"profiling", "false"}, {"terminated-pod-gc-threshold", terminatedPodGCThreshold}}
	return append(flags, tlsFlags(cfg.Security)...)
}

// schedulerSecurity returns the scheduler's hardening flags.
func schedulerSecurity(cfg *config.ClusterConfiguration) []flag {
	return append([]flag{{"profiling", "false"}}, tlsFlags(cfg.Security)...)
}

// tlsFlags restrict a Kubernetes component's serving TLS.
func tlsFlags(s config.Security) []flag {
	if !config.On(s.TLS.Enabled) {
		return nil
	}
	return []flag{
		{"tls-min-version", s.TLS.MinVersion},
		{"tls-cipher-suites", strings.Join(s.TLS.CipherSuites, ",")},
	}
}

// etcdSecurity returns etcd's hardening flags. Auto TLS is off explicitly,
// so a lost certificate flag fails loudly instead of falling back to
// self-signed certificates. etcd spells TLS versions its own way and
// refuses cipher suites when only TLS 1.3 is allowed.
func etcdSecurity(cfg *config.ClusterConfiguration) []flag {
	flags := []flag{{"auto-tls", "false"}, {"peer-auto-tls", "false"}}
	s := cfg.Security.TLS
	if !config.On(s.Enabled) {
		return flags
	}
	if s.MinVersion == config.TLSVersion13 {
		return append(flags, flag{"tls-min-version", "TLS1.3"})
	}
	return append(flags, flag{"tls-min-version", "TLS1.2"}, flag{"cipher-suites", strings.Join(s.CipherSuites, ",")})
}
