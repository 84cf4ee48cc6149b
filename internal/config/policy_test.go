package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/exit"
)

// loadRefusal loads body and wants an exit-2 error containing each of want.
func loadRefusal(t *testing.T, body string, want ...string) {
	t.Helper()
	_, err := loadInit(writeConfig(t, header+body), testHost)
	var inv *InvalidError
	if !errors.As(err, &inv) || exit.Code(err) != exit.Usage {
		t.Fatalf("got %v, want an invalid config (exit 2)", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("got %v, want it to contain %q", err, w)
		}
	}
}

// TestUncheckedValues: values that nothing type-checked before, each
// refused with its field and the fix.
func TestUncheckedValues(t *testing.T) {
	tests := []struct {
		name, body string
		want       []string
	}{
		{"extraConfig of the wrong type", "kubelet: {extraConfig: {failSwapOn: notabool}}\n",
			[]string{`line 3: kubelet.extraConfig.failSwapOn: Invalid value: "string": wrong type: the kubelet wants bool`}},
		{"extraConfig nested type", "kubelet: {extraConfig: {evictionHard: [1]}}\n",
			[]string{`kubelet.extraConfig.evictionHard: Invalid value: "array": wrong type: the kubelet wants map[string]string`}},
		{"extraConfig unknown field", "kubelet: {extraConfig: {failswapon: false, logging: {formatt: json}}}\n",
			[]string{"kubelet.extraConfig.failswapon: Invalid value: \"\": not a KubeletConfiguration (kubelet.config.k8s.io/v1beta1) field",
				"kubelet.extraConfig.logging.formatt: Invalid value"}},
		{"extraConfig kind", "kubelet: {extraConfig: {kind: Pod}}\n", []string{"kubelet.extraConfig.kind: Forbidden"}},
		{"service subnet too small for DNS", "networking: {serviceSubnet: 10.96.0.0/29}\n",
			[]string{`networking.serviceSubnet: Invalid value: "10.96.0.0/29": too small: kubeboot takes the first address (10.96.0.1, the API server's Service) and the tenth (10.96.0.10, cluster DNS`, "an IPv4 /28 or an IPv6 /124"}},
		{"IPv6 service subnet too small", "node: {advertiseAddress: 'fd00::10'}\nnetworking: {serviceSubnet: 'fd00:10:96::/125'}\n",
			[]string{`networking.serviceSubnet: Invalid value: "fd00:10:96::/125": too small`, "fd00:10:96::a"}},
		{"dual-stack second range too small", "networking: {serviceSubnet: '10.96.0.0/16,fd00:10:96::/126', podSubnet: '10.244.0.0/16,fd00:10:244::/56'}\n",
			[]string{`networking.serviceSubnet: Invalid value: "fd00:10:96::/126": too small`}},
		{"image repository with ..", "imageRepository: registry.k8s.io/../evil\n",
			[]string{`imageRepository: Invalid value: "registry.k8s.io/../evil": ".." is not a repository path component`}},
		{"image repository upper case", "imageRepository: registry.example/Mirror\n", []string{`imageRepository: Invalid value: "registry.example/Mirror"`}},
		{"image repository bad host", "imageRepository: bad_host.example/k8s\n", []string{"the registry bad_host.example is not a host name"}},
		{"leaf validity of 1ms", "certificates: {leafValidity: 1ms}\n",
			[]string{`certificates.leafValidity: Invalid value: "1ms": too short: at least 1h`}},
		{"CA validity of a minute", "certificates: {caValidity: 1m, leafValidity: 1m, renewBefore: 1s}\n",
			[]string{`certificates.caValidity: Invalid value: "1m0s": too short: at least 1h`, `certificates.leafValidity: Invalid value: "1m0s": too short`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { loadRefusal(t, tt.body, tt.want...) })
	}
	for _, body := range []string{
		"networking: {serviceSubnet: 10.96.0.0/28}\n",
		"networking: {serviceSubnet: '10.96.0.0/28,fd00:10:96::/124', podSubnet: '10.244.0.0/16,fd00:10:244::/56'}\n",
		"imageRepository: registry.example/mirror_1/k8s\n",
		"certificates: {leafValidity: 1h, renewBefore: 30m}\n",
		"kubelet: {extraConfig: {failSwapOn: false, evictionHard: {memory.available: 5%}, logging: {format: json}, shutdownGracePeriod: 30s, authorization: {mode: null}}}\n",
	} {
		if _, err := loadInit(writeConfig(t, header+body), testHost); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}

// TestSecurityDowngradesRefused: each override that breaks a guarantee
// is refused, naming the flag or field and the opt-out; listing the
// guarantee in security.allowInsecure accepts it, and InsecureOverrides
// describes it for the warning.
func TestSecurityDowngradesRefused(t *testing.T) {
	tests := []struct {
		name, body string
		guarantee  Insecure
		want       string
	}{
		{"etcd client-cert-auth false", "etcd: {local: {extraArgs: [{name: client-cert-auth, value: 'false'}]}}\n", InsecureEtcdClientCertAuth,
			`etcd.local.extraArgs[0]: Invalid value: "--client-cert-auth=false": etcd would accept clients without a certificate from its CA: kubeboot refuses this downgrade; remove the override, or accept it by listing etcd-client-cert-auth in security.allowInsecure`},
		{"etcd client-cert-auth removed", "etcd: {local: {extraArgs: [{name: client-cert-auth, remove: true}]}}\n", InsecureEtcdClientCertAuth,
			`etcd.local.extraArgs[0]: Invalid value: "--client-cert-auth removed"`},
		{"etcd peer-client-cert-auth false", "etcd: {local: {extraArgs: [{name: peer-client-cert-auth, value: '0'}]}}\n", InsecureEtcdPeerClientCertAuth,
			"listing etcd-peer-client-cert-auth in security.allowInsecure"},
		{"etcd auto-tls", "etcd: {local: {extraArgs: [{name: auto-tls, value: 'true'}]}}\n", InsecureEtcdAutoTLS, `"--auto-tls=true": etcd would serve self-signed certificates`},
		{"etcd peer-auto-tls", "etcd: {local: {extraArgs: [{name: peer-auto-tls, value: 'true'}]}}\n", InsecureEtcdAutoTLS, "--peer-auto-tls=true"},
		{"etcd http client URL", "etcd: {local: {extraArgs: [{name: listen-client-urls, value: 'https://127.0.0.1:2379,http://10.0.0.10:2379'}]}}\n", InsecureEtcdPlaintext,
			"etcd would speak plain http, without TLS"},
		{"etcd http peer in initial-cluster", "etcd: {local: {extraArgs: [{name: initial-cluster, value: 'node1=http://10.0.0.10:2380'}]}}\n", InsecureEtcdPlaintext, "--initial-cluster="},
		{"etcd peer URL removed", "etcd: {local: {extraArgs: [{name: listen-peer-urls, remove: true}]}}\n", InsecureEtcdPlaintext, "--listen-peer-urls removed"},
		{"apiserver AlwaysAllow", "apiServer: {extraArgs: [{name: authorization-mode, value: 'AlwaysAllow'}]}\n", InsecureAPIServerAlwaysAllow,
			`apiServer.extraArgs[0]: Invalid value: "--authorization-mode=AlwaysAllow": the API server would allow every request it authenticates`},
		{"apiserver AlwaysAllow in a list", "apiServer: {extraArgs: [{name: authorization-mode, value: 'Node,AlwaysAllow'}]}\n", InsecureAPIServerAlwaysAllow, "apiserver-always-allow"},
		{"apiserver authorization removed", "apiServer: {extraArgs: [{name: authorization-mode, remove: true}]}\n", InsecureAPIServerAlwaysAllow, "--authorization-mode removed"},
		{"kubelet read-only port", "kubelet: {extraConfig: {readOnlyPort: 10255}}\n", InsecureKubeletReadOnlyPort,
			`kubelet.extraConfig.readOnlyPort: Invalid value: "10255": the kubelet would serve pods and node details without authentication`},
		{"kubelet anonymous", "kubelet: {extraConfig: {authentication: {anonymous: {enabled: true}}}}\n", InsecureKubeletAnonymousAuth,
			"kubelet.extraConfig.authentication.anonymous.enabled"},
		{"kubelet AlwaysAllow", "kubelet: {extraConfig: {authorization: {mode: AlwaysAllow}}}\n", InsecureKubeletAlwaysAllow,
			"kubelet.extraConfig.authorization.mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loadRefusal(t, tt.body, tt.want, "docs/security.md")
			c, err := loadInit(writeConfig(t, header+tt.body+"security: {allowInsecure: ["+string(tt.guarantee)+"]}\n"), testHost)
			if err != nil {
				t.Fatalf("with the opt-out: %v", err)
			}
			if w := c.InsecureOverrides(); len(w) != 1 || !strings.Contains(w[0], "allowed by security.allowInsecure: "+string(tt.guarantee)) {
				t.Errorf("InsecureOverrides() = %q, want one warning naming %s", w, tt.guarantee)
			}
		})
	}
}

// TestSecurityPolicyAccepts: overrides that keep or tighten the
// guarantees pass, and the opt-out list takes known names only.
func TestSecurityPolicyAccepts(t *testing.T) {
	for _, body := range []string{
		"etcd: {local: {extraArgs: [{name: client-cert-auth, value: 'true'}, {name: auto-tls, value: 'false'}, {name: listen-metrics-urls, value: 'http://127.0.0.1:2381'}]}}\n",
		"etcd: {local: {extraArgs: [{name: listen-client-http-urls, value: 'https://127.0.0.1:2382'}]}}\n",
		"apiServer: {extraArgs: [{name: authorization-mode, value: 'Node,RBAC,Webhook'}]}\n",
		"apiServer: {extraArgs: [{name: authorization-mode, remove: true}, {name: authorization-config, value: /etc/kubernetes/authz.yaml}]}\n",
		"apiServer: {extraArgs: [{name: anonymous-auth, value: 'false'}]}\n",
		"apiServer: {extraArgs: [{name: anonymous-auth, value: 'true'}]}\nsecurity: {anonymousHealthChecksOnly: false}\n",
		"kubelet: {extraConfig: {readOnlyPort: 0, authentication: {anonymous: {enabled: false}}, authorization: {mode: Webhook}}}\n",
	} {
		c, err := loadInit(writeConfig(t, header+body), testHost)
		if err != nil {
			t.Errorf("%s: %v", body, err)
			continue
		}
		if w := c.InsecureOverrides(); len(w) > 0 {
			t.Errorf("%s: warnings %q", body, w)
		}
	}
	loadRefusal(t, "apiServer: {extraArgs: [{name: anonymous-auth, value: 'true'}]}\n",
		`apiServer.extraArgs[0]: Invalid value: "--anonymous-auth=true": the API server would take anonymous requests everywhere, which security.anonymousHealthChecksOnly forbids: set security.anonymousHealthChecksOnly: false`)
	loadRefusal(t, "security: {allowInsecure: [everything]}\n", `security.allowInsecure[0]: Unsupported value: "everything": supported values: "etcd-client-cert-auth"`)
}
