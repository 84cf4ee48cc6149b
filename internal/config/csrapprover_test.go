package config

import (
	"strings"
	"testing"
)

// TestCSRApproverDefaults: the approver runs exactly when the API server
// verifies kubelet serving certificates, unless the user says otherwise.
func TestCSRApproverDefaults(t *testing.T) {
	tests := []struct {
		name string
		body string
		want bool
	}{
		{"default", "", true},
		{"verification off", "security: {verifyKubeletServingCerts: false}\n", false},
		{"verification off, approver on", "security: {verifyKubeletServingCerts: false}\ncsrApprover: {enabled: true}\n", true},
		{"approver off", "csrApprover: {enabled: false}\n", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := loadInit(writeConfig(t, header+tc.body), testHost)
			if err != nil {
				t.Fatal(err)
			}
			if c.CSRApprover.Enabled == nil || *c.CSRApprover.Enabled != tc.want || c.CSRApproverEnabled() != tc.want {
				t.Errorf("csrApprover.enabled = %v, want %v", c.CSRApprover.Enabled, tc.want)
			}
			if c.CSRApprover.Image != "registry.k8s.io/pause:3.10.2" {
				t.Errorf("csrApprover.image = %q, want registry.k8s.io/pause:3.10.2", c.CSRApprover.Image)
			}
		})
	}
}

// TestDefaultKubebootPodImage: kubeboot's own pods start from the pause
// image under the configured repository, which a mirror serves like the
// control plane's images; no image of kubeboot's is named.
func TestDefaultKubebootPodImage(t *testing.T) {
	body := header + "imageRepository: mirror.example/k8s\netcd: {local: {scheduledSnapshots: {}}}\n"
	c, err := loadInit(writeConfig(t, body), testHost)
	if err != nil {
		t.Fatal(err)
	}
	want := "mirror.example/k8s/pause:3.10.2"
	if c.CSRApprover.Image != want || c.Etcd.Local.ScheduledSnapshots.Image != want {
		t.Errorf("images %q and %q, want %q", c.CSRApprover.Image, c.Etcd.Local.ScheduledSnapshots.Image, want)
	}
}

func TestValidateCSRApproverImage(t *testing.T) {
	for image, want := range map[string]string{
		"kubeboot.io/kubeboot:v0.4.0":                                          "",
		"registry.example:5000/ops/kubeboot@sha256:" + strings.Repeat("a", 64): "",
		"kubeboot":                     "name a tag or a digest",
		"registry.example:5000/kb":     "name a tag or a digest",
		"kubeboot.io/kubeboot:v1 --x":  "want an image reference",
		"":                             "want an image reference",
		"kubeboot.io/Kubeboot:v1":      "want an image reference",
		"kubeboot.io/kubeboot:v1\n--a": "want an image reference",
	} {
		c := New()
		SetDefaults(c, testHost)
		c.CSRApprover.Image = image
		errs := Validate(c)
		switch {
		case want == "" && len(errs) > 0:
			t.Errorf("%q: %v", image, errs)
		case want != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), "csrApprover.image") || !strings.Contains(errs[0].Error(), want)):
			t.Errorf("%q: got %v, want one csrApprover.image error containing %q", image, errs, want)
		}
	}
}
