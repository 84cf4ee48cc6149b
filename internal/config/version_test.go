package config

import (
	"errors"
	"strings"
	"testing"
)

// TestParseKubernetesVersion: one grammar, a release with an optional
// leading v, of a supported minor; nothing that is no image tag passes.
func TestParseKubernetesVersion(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"v1.36.3", "v1.36.3"},
		{"1.36.3", "v1.36.3"},
		{"v1.34.0", "v1.34.0"},
		{"v1.36.3+evil", ""},
		{"v1.36.3 ", ""},
		{" v1.36.3", ""},
		{"v1.36.3-rc.1", ""},
		{"v1.36", ""},
		{"V1.36.3", ""},
		{"v01.36.3", ""},
		{"v1.36.3.4", ""},
		{"v1.99999999999999999999.0", ""},
		{"v1.37.0", ""},
		{"v1.33.9", ""},
		{"v2.36.0", ""},
		{"", ""},
	} {
		v, err := ParseKubernetesVersion(tc.in)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%q: accepted as %s", tc.in, v)
		case tc.want != "" && (err != nil || "v"+v.String() != tc.want):
			t.Errorf("%q: %v, %v; want %s", tc.in, v, err, tc.want)
		case CanonicalKubernetesVersion(tc.in) != tc.want && tc.want != "":
			t.Errorf("%q: canonical %q, want %q", tc.in, CanonicalKubernetesVersion(tc.in), tc.want)
		}
	}
}

// TestKubernetesVersionInFile: a kubernetesVersion that is no release is
// blamed on kubernetesVersion, as written, and on nothing it defaults (the
// addons' images); one without its v is a release.
func TestKubernetesVersionInFile(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"v1.36.3+evil", `line 3: kubernetesVersion: Invalid value: "v1.36.3+evil": want a release version like v1.36.3`},
		{"v1.36.3 ", `line 3: kubernetesVersion: Invalid value: "v1.36.3 ": want a release version`},
		{"garbage", `line 3: kubernetesVersion: Invalid value: "garbage": want a release version`},
		{"v1.37.0", `line 3: kubernetesVersion: Invalid value: "v1.37.0": unsupported: kubeboot supports v1.34 to v1.36`},
	} {
		_, err := loadInit(writeConfig(t, header+"kubernetesVersion: \""+tc.in+"\"\n"), testHost)
		var inv *InvalidError
		if !errors.As(err, &inv) || len(inv.Problems) != 1 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("kubernetesVersion %q: %v, want only %q", tc.in, err, tc.want)
		}
	}
	c, err := loadInit(writeConfig(t, header+"kubernetesVersion: 1.35.2\n"), testHost)
	if err != nil || c.KubernetesVersion != "v1.35.2" || c.Addons.KubeProxy.Image != "registry.k8s.io/kube-proxy:v1.35.2" {
		t.Errorf("kubernetesVersion 1.35.2: %v, %+v", err, c)
	}
}

// TestAtKubernetesVersion: the configuration at another release moves the
// addon images that were its release's defaults, keeps the ones it names,
// and refuses what ParseKubernetesVersion refuses.
func TestAtKubernetesVersion(t *testing.T) {
	c := New()
	c.KubernetesVersion = "v1.35.2"
	c.Addons.CoreDNS.Image = "mirror.example/coredns:v1.13.1"
	SetDefaults(c, testHost)
	next, err := c.AtKubernetesVersion("1.36.3")
	if err != nil {
		t.Fatal(err)
	}
	if next.KubernetesVersion != "v1.36.3" || next.Addons.KubeProxy.Image != "registry.k8s.io/kube-proxy:v1.36.3" ||
		next.Addons.CoreDNS.Image != "mirror.example/coredns:v1.13.1" {
		t.Errorf("at 1.36.3: %+v", next)
	}
	if c.KubernetesVersion != "v1.35.2" || c.Addons.KubeProxy.Image != "registry.k8s.io/kube-proxy:v1.35.2" {
		t.Errorf("the original changed: %+v", c)
	}
	if _, err := c.AtKubernetesVersion("v1.36.3+evil"); err == nil {
		t.Error("v1.36.3+evil accepted")
	}
}
