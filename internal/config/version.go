package config

import (
	"fmt"
	"regexp"
	"sync"

	"k8s.io/apimachinery/pkg/util/version"
)

// The supported Kubernetes minor versions, inclusive.
const (
	MinKubernetesMinor = 34
	MaxKubernetesMinor = 36
)

// releaseVersion is the one grammar of a Kubernetes version in kubeboot:
// a release, MAJOR.MINOR.PATCH in decimal without leading zeros, with an
// optional leading v. Nothing else is a tag of every image kubeboot
// renders: no pre-release, no build metadata, no spaces.
var releaseVersion = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^v?(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})$`)
})

// ParseKubernetesVersion parses s as kubeboot parses every Kubernetes
// version it is given, kubernetesVersion and a version on the command
// line alike: a release of a minor version kubeboot renders (v1.34 to
// v1.36), with or without its leading v. Its canonical spelling, which
// tags the images, is "v" + String(). The error says what to give
// instead.
func ParseKubernetesVersion(s string) (*version.Version, error) {
	if !releaseVersion().MatchString(s) {
		return nil, fmt.Errorf("want a release version like %s: MAJOR.MINOR.PATCH, without pre-release, build metadata or spaces", DefaultKubernetesVersion)
	}
	v := version.MustParseSemantic(s)
	if v.Major() != 1 || v.Minor() < MinKubernetesMinor || v.Minor() > MaxKubernetesMinor {
		return nil, fmt.Errorf("unsupported: kubeboot supports v1.%d to v1.%d, like %s", MinKubernetesMinor, MaxKubernetesMinor, DefaultKubernetesVersion)
	}
	return v, nil
}

// CanonicalKubernetesVersion is s in the spelling that tags the images
// (v1.36.3 for 1.36.3), or s itself when ParseKubernetesVersion refuses
// it, which Validate then reports.
func CanonicalKubernetesVersion(s string) string {
	v, err := ParseKubernetesVersion(s)
	if err != nil {
		return s
	}
	return "v" + v.String()
}

// AtKubernetesVersion is a copy of c at the release s, as an upgrade to s
// renders it: kubernetesVersion is s in its canonical spelling, and an
// addon image at its default for c's release moves to its default for s
// (one the configuration names stays). The error, from
// ParseKubernetesVersion, says what to give instead of s.
func (c *ClusterConfiguration) AtKubernetesVersion(s string) (*ClusterConfiguration, error) {
	if _, err := ParseKubernetesVersion(s); err != nil {
		return nil, err
	}
	next := *c
	next.KubernetesVersion = CanonicalKubernetesVersion(s)
	dns, proxy := &next.Addons.CoreDNS, &next.Addons.KubeProxy
	if dns.Image == DefaultCoreDNSImage(c.ImageRepository, c.KubernetesVersion) {
		dns.Image = DefaultCoreDNSImage(c.ImageRepository, next.KubernetesVersion)
	}
	if proxy.Image == DefaultKubeProxyImage(c.ImageRepository, c.KubernetesVersion) {
		proxy.Image = DefaultKubeProxyImage(c.ImageRepository, next.KubernetesVersion)
	}
	return &next, nil
}
