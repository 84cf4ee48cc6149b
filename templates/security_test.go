package templates

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/config"
)

// testKey is a fixed encryption key, so the golden file is stable.
var testKey = []byte("0123456789abcdef0123456789abcdef")

// TestAPIServerFilesGolden pins the files the API server reads beside its
// flags. They are .golden, not .yaml, so the manifest tests skip them.
func TestAPIServerFilesGolden(t *testing.T) {
	encryption, err := EncryptionConfig(config.ProviderSecretbox, testKey)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]func() ([]byte, error){
		"encryption-config.yaml":     func() ([]byte, error) { return encryption, nil },
		"audit-policy.yaml":          AuditPolicy,
		"admission-config.yaml":      AdmissionConfig,
		"authentication-config.yaml": AuthenticationConfig,
	}
	dir := filepath.Join("testdata", "apiserver-files")
	for name, render := range files {
		got, err := render()
		if err != nil {
			t.Fatal(err)
		}
		golden := filepath.Join(dir, name+".golden")
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(golden, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run go test ./templates -update)", err)
		}
		if diff := cmp.Diff(string(want), string(got)); diff != "" {
			t.Errorf("%s mismatch (-golden +got):\n%s", golden, diff)
		}
	}
}

func TestEncryptionConfigRoundTrip(t *testing.T) {
	for _, provider := range []string{config.ProviderSecretbox, config.ProviderAESCBC} {
		data, err := EncryptionConfig(provider, testKey)
		if err != nil {
			t.Fatal(err)
		}
		got, err := CheckEncryptionConfig(data)
		if err != nil || got != provider {
			t.Errorf("%s: CheckEncryptionConfig = %q, %v", provider, got, err)
		}
		// kube-bench's 1.2.28 reads the provider from the line after
		// "providers:"; keep the file in that shape.
		_, after, _ := strings.Cut(string(data), "providers:\n")
		if line, _, _ := strings.Cut(after, "\n"); strings.TrimSpace(line) != "- "+provider+":" {
			t.Errorf("%s: the line after providers: is %q", provider, line)
		}
	}
	if _, err := EncryptionConfig(config.ProviderSecretbox, testKey[:16]); err == nil {
		t.Error("a 16-byte key must be refused")
	}
	if _, err := EncryptionConfig("aesgcm", testKey); err == nil {
		t.Error("an unknown provider must be refused")
	}
}

func TestCheckEncryptionConfigErrors(t *testing.T) {
	secret := base64.StdEncoding.EncodeToString([]byte("sixteen byte key"))
	tests := []struct{ name, file, want string }{
		{"not yaml", "{", "not a YAML EncryptionConfiguration"},
		{"wrong kind", "apiVersion: v1\nkind: ConfigMap\n", "want apiVersion apiserver.config.k8s.io/v1"},
		{"no secrets", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [configmaps]\n  providers: [{identity: {}}]\n", "no resources entry covers secrets"},
		{"no providers", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n", "resources[0] has no providers"},
		{"unknown provider", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers: [{rot13: {}}]\n", "names no known provider"},
		{"no keys", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers: [{aescbc: {keys: []}}]\n", "providers[0].aescbc: no keys"},
		{"secretbox key too short", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers: [{secretbox: {keys: [{name: k, secret: " + secret + "}]}}]\n", "keys[0] (k): the secret is 16 bytes, want [32]"},
		{"not base64", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers: [{aescbc: {keys: [{name: k, secret: '%%%'}]}}]\n", "the secret is not base64"},
	}
	for _, tt := range tests {
		_, err := CheckEncryptionConfig([]byte(tt.file))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error containing %q", tt.name, err, tt.want)
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "%%%") {
			t.Errorf("%s: the error quotes key material: %v", tt.name, err)
		}
	}
	// A file rotated by hand to a KMS plugin, identity kept for old data.
	rotated := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: ['*.*']\n  providers:\n  - kms: {apiVersion: v2, name: vault, endpoint: unix:///kms.sock}\n  - identity: {}\n"
	if got, err := CheckEncryptionConfig([]byte(rotated)); err != nil || got != "kms" {
		t.Errorf("rotated file: %q, %v", got, err)
	}
}

// TestAuditPolicyRules checks the rule order: the first matching rule wins.
func TestAuditPolicyRules(t *testing.T) {
	data, err := AuditPolicy()
	if err != nil {
		t.Fatal(err)
	}
	var p auditPolicy
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		t.Fatal(err)
	}
	levels := []string{}
	for _, r := range p.Rules {
		levels = append(levels, r.Level)
	}
	if diff := cmp.Diff([]string{"None", "Metadata", "Request", "Metadata"}, levels); diff != "" {
		t.Fatalf("rule levels (-want +got):\n%s", diff)
	}
	if !strings.Contains(strings.Join(p.Rules[0].NonResourceURLs, ","), "/readyz*") || len(p.Rules[0].Resources) != 0 {
		t.Errorf("the first rule must drop the health checks only: %+v", p.Rules[0])
	}
	sensitive := p.Rules[1].Resources
	if diff := cmp.Diff([]groupResources{
		{Group: "", Resources: []string{"configmaps", "secrets", "serviceaccounts/token"}},
		{Group: "authentication.k8s.io", Resources: []string{"tokenreviews"}},
	}, sensitive); diff != "" {
		t.Errorf("metadata-only resources (-want +got):\n%s", diff)
	}
	if p.Rules[2].Verbs == nil || len(p.Rules[2].Resources) != 0 {
		t.Errorf("the third rule must log every write: %+v", p.Rules[2])
	}
}

func TestAuthenticationConfigAllowsHealthChecksAndClusterInfoOnly(t *testing.T) {
	data, err := AuthenticationConfig()
	if err != nil {
		t.Fatal(err)
	}
	var c authenticationConfiguration
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, cond := range c.Anonymous.Conditions {
		paths = append(paths, cond["path"])
	}
	want := "/healthz,/livez,/readyz,/api/v1/namespaces/kube-public/configmaps/cluster-info"
	if !c.Anonymous.Enabled || strings.Join(paths, ",") != want {
		t.Errorf("anonymous: %+v", c.Anonymous)
	}
}

// flagsOf returns a pod's command-line flags by name.
func flagsOf(pod *corev1.Pod) map[string]string {
	flags := map[string]string{}
	for _, arg := range pod.Spec.Containers[0].Command[1:] {
		name, value, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		flags[name] = value
	}
	return flags
}

func volumeNames(pod *corev1.Pod) string {
	var names []string
	for _, v := range pod.Spec.Volumes {
		names = append(names, v.Name)
	}
	return strings.Join(names, ",")
}

// securityOff turns every switch of the security section off.
func securityOff(c *config.ClusterConfiguration) {
	off := false
	s := &c.Security
	s.EncryptionAtRest.Enabled, s.Audit.Enabled, s.TLS.Enabled = &off, &off, &off
	s.AnonymousHealthChecksOnly, s.VerifyKubeletServingCerts, s.EventRateLimit, s.DenyServiceExternalIPs = &off, &off, &off, &off
}

// securityCustom exercises the values of the security section.
func securityCustom(c *config.ClusterConfiguration) {
	c.Security.TLS.MinVersion = config.TLSVersion13
	c.Security.Audit.PolicyFile = "/etc/kubeboot/audit-policy.yaml"
	c.Security.Audit.LogDir = "/srv/audit"
	c.Security.Audit.MaxAge = 90
	off := false
	c.Security.EventRateLimit, c.Security.AnonymousHealthChecksOnly = &off, &off
}

func TestSecuritySwitches(t *testing.T) {
	on := mustAll(t, newConfig(nil))
	off := mustAll(t, newConfig(securityOff))
	hardening := []string{
		"encryption-provider-config", "audit-policy-file", "audit-log-path", "authentication-config",
		"admission-control-config-file", "kubelet-certificate-authority", "tls-min-version", "tls-cipher-suites",
	}
	for _, f := range hardening {
		if _, ok := flagsOf(on[config.NameAPIServer])[f]; !ok {
			t.Errorf("on: the API server lacks --%s", f)
		}
		if v, ok := flagsOf(off[config.NameAPIServer])[f]; ok {
			t.Errorf("off: the API server still has --%s=%s", f, v)
		}
	}
	if got := flagsOf(off[config.NameAPIServer])["enable-admission-plugins"]; got != "NodeRestriction" {
		t.Errorf("off: admission plugins %q, want kubeadm's NodeRestriction", got)
	}
	if got := volumeNames(off[config.NameAPIServer]); strings.Contains(got, "audit") || strings.Contains(got, "apiserver-config") {
		t.Errorf("off: the API server still mounts %s", got)
	}
	for _, c := range []string{config.NameControllerManager, config.NameScheduler} {
		if _, ok := flagsOf(off[c])["tls-cipher-suites"]; ok {
			t.Errorf("off: %s keeps --tls-cipher-suites", c)
		}
		if flagsOf(on[c])["profiling"] != "false" || flagsOf(off[c])["profiling"] != "false" {
			t.Errorf("%s: --profiling=false is a plain default, on whatever the switches", c)
		}
	}
	if _, ok := flagsOf(off[config.NameEtcd])["cipher-suites"]; ok || flagsOf(off[config.NameEtcd])["auto-tls"] != "false" {
		t.Errorf("off: etcd flags %v", flagsOf(off[config.NameEtcd]))
	}

	custom := mustAll(t, newConfig(securityCustom))
	api := flagsOf(custom[config.NameAPIServer])
	if api["audit-policy-file"] != "/etc/kubeboot/audit-policy.yaml" || api["audit-log-path"] != "/srv/audit/audit.log" || api["audit-log-maxage"] != "90" {
		t.Errorf("custom audit flags: %v", api)
	}
	if _, ok := api["authentication-config"]; ok {
		t.Error("custom: --authentication-config with anonymousHealthChecksOnly off")
	}
	// The user's policy is mounted by itself; with EventRateLimit and the
	// authentication config off, kubeboot's config directory is not needed.
	if got := volumeNames(custom[config.NameAPIServer]); !strings.Contains(got, "audit-policy-file") || strings.Contains(got, "apiserver-config") {
		t.Errorf("custom volumes: %s", got)
	}
	etcd := flagsOf(custom[config.NameEtcd])
	if _, ok := etcd["cipher-suites"]; ok || etcd["tls-min-version"] != "TLS1.3" {
		t.Errorf("TLS 1.3 only: etcd refuses cipher suites, got %v", etcd)
	}
}

// TestUserAuthenticationFlagsWin checks that an anonymous-auth or
// authentication-config extra arg replaces kubeboot's configuration, which
// the API server would refuse beside either.
func TestUserAuthenticationFlagsWin(t *testing.T) {
	for _, arg := range []config.Arg{{Name: "anonymous-auth", Value: "false"}, {Name: "authentication-config", Value: "/etc/authn.yaml"}} {
		pods := mustAll(t, newConfig(func(c *config.ClusterConfiguration) { c.APIServer.ExtraArgs = []config.Arg{arg} }))
		data, err := Marshal(pods[config.NameAPIServer])
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(data, []byte("--authentication-config=")); arg.Name == "anonymous-auth" && n != 0 || arg.Name != "anonymous-auth" && n != 1 {
			t.Errorf("%s: %d --authentication-config flags", arg.Name, n)
		}
	}
}

func mustAll(t *testing.T, cfg *config.ClusterConfiguration) map[string]*corev1.Pod {
	t.Helper()
	manifests, err := All(cfg, EtcdMembership{}, testKubeboot)
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]*corev1.Pod{}
	for _, m := range manifests {
		pods[m.Component] = m.Pod
	}
	return pods
}

func TestAPIServerFiles(t *testing.T) {
	paths := func(edit func(*config.ClusterConfiguration)) []string {
		files, err := APIServerFiles(newConfig(edit))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range files {
			if len(f.Data) == 0 {
				t.Errorf("%s is empty", f.Path)
			}
			out = append(out, f.Path)
		}
		return out
	}
	want := []string{"/etc/kubernetes/apiserver/audit-policy.yaml", "/etc/kubernetes/apiserver/admission-config.yaml", "/etc/kubernetes/apiserver/authentication-config.yaml"}
	if diff := cmp.Diff(want, paths(nil)); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	if got := paths(securityOff); len(got) != 0 {
		t.Errorf("off: %v", got)
	}
	// The user's policy is theirs to write; kubeboot renders neither it
	// nor, with the switches off, the other two.
	if got := paths(securityCustom); len(got) != 0 {
		t.Errorf("custom: %v", got)
	}
}
