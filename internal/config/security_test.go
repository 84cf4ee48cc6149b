package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSecurityDefaultsAreOn checks that every hardening is on after
// defaulting and that an explicit false in a file survives it.
func TestSecurityDefaultsAreOn(t *testing.T) {
	c, err := loadInit("", testHost)
	if err != nil {
		t.Fatal(err)
	}
	s := c.Security
	for name, b := range map[string]*bool{
		"encryptionAtRest.enabled": s.EncryptionAtRest.Enabled, "audit.enabled": s.Audit.Enabled, "tls.enabled": s.TLS.Enabled,
		"anonymousHealthChecksOnly": s.AnonymousHealthChecksOnly, "verifyKubeletServingCerts": s.VerifyKubeletServingCerts,
		"eventRateLimit": s.EventRateLimit, "denyServiceExternalIPs": s.DenyServiceExternalIPs,
	} {
		if b == nil || !*b {
			t.Errorf("security.%s is not on by default", name)
		}
	}
	if s.Audit.MaxAge < 30 || s.Audit.MaxBackup < 10 || s.Audit.MaxSize < 100 {
		t.Errorf("audit rotation below the CIS minimums: %+v", s.Audit)
	}
	if c.AuditLogPath() != "/var/log/kubernetes/audit/audit.log" || c.AuditPolicyPath() != "/etc/kubernetes/apiserver/audit-policy.yaml" ||
		c.EncryptionConfigPath() != "/etc/kubernetes/pki/encryption-config.yaml" {
		t.Errorf("paths: %s %s %s", c.AuditLogPath(), c.AuditPolicyPath(), c.EncryptionConfigPath())
	}

	off, err := loadInit(writeConfig(t, header+`
security:
  encryptionAtRest: {enabled: false}
  audit: {enabled: false, policyFile: /etc/kubeboot/audit.yaml}
  tls: {enabled: false, cipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]}
  anonymousHealthChecksOnly: false
  verifyKubeletServingCerts: false
  eventRateLimit: false
  denyServiceExternalIPs: false
  etcdDataDirOwner: root
`), testHost)
	if err != nil {
		t.Fatal(err)
	}
	o := off.Security
	for name, b := range map[string]*bool{
		"encryptionAtRest.enabled": o.EncryptionAtRest.Enabled, "audit.enabled": o.Audit.Enabled, "tls.enabled": o.TLS.Enabled,
		"anonymousHealthChecksOnly": o.AnonymousHealthChecksOnly, "verifyKubeletServingCerts": o.VerifyKubeletServingCerts,
		"eventRateLimit": o.EventRateLimit, "denyServiceExternalIPs": o.DenyServiceExternalIPs,
	} {
		if On(b) {
			t.Errorf("security.%s: an explicit false was defaulted to on", name)
		}
	}
	if diff := cmp.Diff([]string{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}, o.TLS.CipherSuites); diff != "" {
		t.Errorf("user cipher suites replaced (-want +got):\n%s", diff)
	}
	if off.AuditPolicyPath() != "/etc/kubeboot/audit.yaml" || o.EtcdDataDirOwner != "root" {
		t.Errorf("user values lost: %s, %s", off.AuditPolicyPath(), o.EtcdDataDirOwner)
	}
}

func TestOn(t *testing.T) {
	yes, no := true, false
	if !On(nil) || !On(&yes) || On(&no) {
		t.Error("On: unset and true are on, false is off")
	}
}
