package config

import (
	"net/url"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Insecure names one security guarantee that kubeboot keeps even against
// an extraArgs or extraConfig override, unless security.allowInsecure
// lists it. docs/security.md describes each.
type Insecure string

// The guarantees an override may only break with security.allowInsecure.
const (
	// InsecureEtcdClientCertAuth: etcd's --client-cert-auth stays true.
	InsecureEtcdClientCertAuth Insecure = "etcd-client-cert-auth"
	// InsecureEtcdPeerClientCertAuth: etcd's --peer-client-cert-auth stays true.
	InsecureEtcdPeerClientCertAuth Insecure = "etcd-peer-client-cert-auth"
	// InsecureEtcdAutoTLS: etcd's --auto-tls and --peer-auto-tls stay false.
	InsecureEtcdAutoTLS Insecure = "etcd-auto-tls"
	// InsecureEtcdPlaintext: etcd's client and peer URLs stay https.
	InsecureEtcdPlaintext Insecure = "etcd-plaintext"
	// InsecureAPIServerAlwaysAllow: the API server never authorizes with AlwaysAllow.
	InsecureAPIServerAlwaysAllow Insecure = "apiserver-always-allow"
	// InsecureKubeletReadOnlyPort: the kubelet's readOnlyPort stays 0.
	InsecureKubeletReadOnlyPort Insecure = "kubelet-read-only-port"
	// InsecureKubeletAnonymousAuth: the kubelet refuses anonymous requests.
	InsecureKubeletAnonymousAuth Insecure = "kubelet-anonymous-auth"
	// InsecureKubeletAlwaysAllow: the kubelet authorizes with the API server's webhook.
	InsecureKubeletAlwaysAllow Insecure = "kubelet-always-allow"
)

// InsecureNames lists every value security.allowInsecure accepts.
var InsecureNames = []Insecure{
	InsecureEtcdClientCertAuth, InsecureEtcdPeerClientCertAuth, InsecureEtcdAutoTLS, InsecureEtcdPlaintext,
	InsecureAPIServerAlwaysAllow, InsecureKubeletReadOnlyPort, InsecureKubeletAnonymousAuth, InsecureKubeletAlwaysAllow,
}

// downgrade is one override that breaks a guarantee.
type downgrade struct {
	guarantee Insecure
	path      *field.Path
	value     string
	// breaks says what the override does.
	breaks string
}

// etcdURLFlags are etcd's flags that take client or peer URLs, and whether
// etcd's own default, when kubeboot's flag is removed, is plain http.
var etcdURLFlags = map[string]bool{
	"listen-client-urls": true, "advertise-client-urls": true, "listen-peer-urls": true,
	"initial-advertise-peer-urls": true, "initial-cluster": true, "listen-client-http-urls": false,
}

// etcdDowngrades finds the etcd extraArgs that turn off client
// certificates, use self-signed certificates or plain http.
func etcdDowngrades(p *field.Path, args []Arg) []downgrade {
	var out []downgrade
	for i, a := range args {
		d := downgrade{path: p.Index(i), value: argText(a)}
		switch name := a.Name; name {
		case "client-cert-auth", "peer-client-cert-auth":
			if a.Remove || isBool(a.Value, false) {
				d.guarantee, d.breaks = InsecureEtcdClientCertAuth, "etcd would accept clients without a certificate from its CA"
				if name == "peer-client-cert-auth" {
					d.guarantee, d.breaks = InsecureEtcdPeerClientCertAuth, "etcd would accept peers without a certificate from its CA"
				}
			}
		case "auto-tls", "peer-auto-tls":
			if !a.Remove && isBool(a.Value, true) {
				d.guarantee, d.breaks = InsecureEtcdAutoTLS, "etcd would serve self-signed certificates that no client can verify"
			}
		default:
			removedToHTTP, isURL := etcdURLFlags[name]
			if isURL && (a.Remove && removedToHTTP || !a.Remove && plainURL(name, a.Value)) {
				d.guarantee, d.breaks = InsecureEtcdPlaintext, "etcd would speak plain http, without TLS"
			}
		}
		if d.guarantee != "" {
			out = append(out, d)
		}
	}
	return out
}

// plainURL says whether a URL flag's value names a URL that is not https.
// initial-cluster lists name=URL pairs.
func plainURL(name, value string) bool {
	for _, item := range strings.Split(value, ",") {
		if name == "initial-cluster" {
			_, item, _ = strings.Cut(item, "=")
		}
		if u, err := url.Parse(strings.TrimSpace(item)); err == nil && !strings.EqualFold(u.Scheme, "https") {
			return true
		}
	}
	return false
}

// apiServerDowngrades finds the API server extraArgs that authorize every
// request, and an anonymous-auth that the security switch does not allow.
func apiServerDowngrades(p *field.Path, args []Arg) []downgrade {
	var out []downgrade
	for i, a := range args {
		d := downgrade{path: p.Index(i), value: argText(a)}
		modes := strings.Split(a.Value, ",")
		// Without --authorization-mode and --authorization-config, the
		// API server authorizes everything.
		if a.Name == "authorization-mode" && (slices.Contains(modes, "AlwaysAllow") || a.Remove && !hasArgNamed(args, "authorization-config")) {
			d.guarantee, d.breaks = InsecureAPIServerAlwaysAllow, "the API server would allow every request it authenticates, with neither Node nor RBAC authorization"
			out = append(out, d)
		}
	}
	return out
}

// kubeletDowngrades finds the kubelet.extraConfig fields that open the
// kubelet's unauthenticated port or let anyone use its API.
func kubeletDowngrades(p *field.Path, kc *kubeletv1beta1.KubeletConfiguration) []downgrade {
	var out []downgrade
	if kc.ReadOnlyPort != 0 {
		out = append(out, downgrade{InsecureKubeletReadOnlyPort, p.Child("readOnlyPort"), strconv.Itoa(int(kc.ReadOnlyPort)),
			"the kubelet would serve pods and node details without authentication"})
	}
	if e := kc.Authentication.Anonymous.Enabled; e != nil && *e {
		out = append(out, downgrade{InsecureKubeletAnonymousAuth, p.Child("authentication", "anonymous", "enabled"), "true",
			"the kubelet would take requests without credentials"})
	}
	if kc.Authorization.Mode == kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow {
		out = append(out, downgrade{InsecureKubeletAlwaysAllow, p.Child("authorization", "mode"), string(kc.Authorization.Mode),
			"the kubelet would let any authenticated client exec into pods and read their logs"})
	}
	return out
}

// downgrades lists every override of c that breaks a guarantee, with the
// kubelet.extraConfig decode errors found on the way.
func downgrades(c *ClusterConfiguration) ([]downgrade, field.ErrorList) {
	var out []downgrade
	if c.Etcd.Local != nil {
		out = append(out, etcdDowngrades(field.NewPath("etcd", "local", "extraArgs"), c.Etcd.Local.ExtraArgs)...)
	}
	out = append(out, apiServerDowngrades(field.NewPath("apiServer", "extraArgs"), c.APIServer.ExtraArgs)...)
	p := field.NewPath("kubelet", "extraConfig")
	kc, errs := decodeKubeletExtraConfig(p, c.Kubelet.ExtraConfig)
	return append(out, kubeletDowngrades(p, kc)...), errs
}

// validatePolicy refuses each downgrade that security.allowInsecure does
// not list, an anonymous-auth that security.anonymousHealthChecksOnly
// forbids, and names that allowInsecure does not know.
func validatePolicy(c *ClusterConfiguration) field.ErrorList {
	allow := field.NewPath("security", "allowInsecure")
	var errs field.ErrorList
	for i, name := range c.Security.AllowInsecure {
		if !slices.Contains(InsecureNames, name) {
			errs = append(errs, field.NotSupported(allow.Index(i), name, InsecureNames))
		}
	}
	found, decodeErrs := downgrades(c)
	errs = append(errs, decodeErrs...)
	for _, d := range found {
		if !slices.Contains(c.Security.AllowInsecure, d.guarantee) {
			errs = append(errs, field.Invalid(d.path, d.value, d.breaks+
				": kubeboot refuses this downgrade; remove the override, or accept it by listing "+string(d.guarantee)+" in security.allowInsecure (see docs/security.md)"))
		}
	}
	for i, a := range c.APIServer.ExtraArgs {
		if a.Name == "anonymous-auth" && !a.Remove && isBool(a.Value, true) && On(c.Security.AnonymousHealthChecksOnly) {
			errs = append(errs, field.Invalid(field.NewPath("apiServer", "extraArgs").Index(i), argText(a),
				"the API server would take anonymous requests everywhere, which security.anonymousHealthChecksOnly forbids: set security.anonymousHealthChecksOnly: false to allow them (RBAC still applies), or remove the override"))
		}
	}
	return errs
}

// InsecureOverrides describes each override of c that breaks a guarantee
// because security.allowInsecure allows it, for a loud warning on every
// run. It assumes a validated configuration.
func (c *ClusterConfiguration) InsecureOverrides() []string {
	found, _ := downgrades(c)
	var out []string
	for _, d := range found {
		out = append(out, d.path.String()+" ("+d.value+"): "+d.breaks+", allowed by security.allowInsecure: "+string(d.guarantee))
	}
	return out
}

// argText renders an extra arg as its flag, or its removal.
func argText(a Arg) string {
	if a.Remove {
		return "--" + a.Name + " removed"
	}
	return "--" + a.Name + "=" + a.Value
}

// isBool says whether a flag value parses as the boolean want.
func isBool(value string, want bool) bool {
	b, err := strconv.ParseBool(value)
	return err == nil && b == want
}

// hasArgNamed says whether args set or remove the flag name.
func hasArgNamed(args []Arg, name string) bool {
	return slices.ContainsFunc(args, func(a Arg) bool { return a.Name == name && !a.Remove })
}
