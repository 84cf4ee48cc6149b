package hostile

import (
	"os"
	"strings"
	"testing"
)

// downgrade is a row in which init refuses an override that breaks a
// security guarantee, naming the flag or field and the opt-out, and
// changes nothing.
func downgrade(name, fields, message, guarantee string) row {
	return row{
		defect: "27.policy", name: name,
		setup: func(e env) []string {
			return append([]string{"init", "--root", e.node, "--config", e.config("c.yaml", fields)}, skip...)
		},
		code: 2, message: message + ": kubeboot refuses this downgrade; remove the override, or accept it by listing " + guarantee + " in security.allowInsecure",
	}
}

// optedOut is a row in which init renders a downgrade that
// security.allowInsecure lists: the manifest or file has it.
func optedOut(name, fields, file, want string) row {
	return row{
		defect: "27.policy", name: name,
		setup: func(e env) []string {
			return append([]string{"init", "--root", e.node, "--config", e.config("c.yaml", fields)}, skip...)
		},
		code: 0, allowed: []string{"/node"},
		check: func(e env, res result) {
			data, err := os.ReadFile(e.path("node" + file))
			if err != nil || !strings.Contains(string(data), want) {
				e.t.Errorf("%s lacks %q (%v)", file, want, err)
			}
			// Never silently: the run warns of what it gives up.
			if !strings.Contains(res.stderr, "WARNING: security.allowInsecure: ") {
				e.t.Errorf("init does not warn of the downgrade it renders:\n%s", res.stderr)
			}
		},
	}
}

// policyRows are issue 27's policy: no silent downgrade through extraArgs
// or kubelet.extraConfig, and security.allowInsecure as the one opt-out.
var policyRows = []row{
	downgrade("etcd --client-cert-auth=false", "etcd: {local: {extraArgs: [{name: client-cert-auth, value: 'false'}]}}\n",
		`etcd.local.extraArgs[0]: Invalid value: "--client-cert-auth=false": etcd would accept clients without a certificate from its CA`, "etcd-client-cert-auth"),
	downgrade("etcd --peer-client-cert-auth removed", "etcd: {local: {extraArgs: [{name: peer-client-cert-auth, remove: true}]}}\n",
		`etcd.local.extraArgs[0]: Invalid value: "--peer-client-cert-auth removed": etcd would accept peers without a certificate from its CA`, "etcd-peer-client-cert-auth"),
	downgrade("etcd --auto-tls=true", "etcd: {local: {extraArgs: [{name: auto-tls, value: 'true'}]}}\n",
		`etcd.local.extraArgs[0]: Invalid value: "--auto-tls=true": etcd would serve self-signed certificates that no client can verify`, "etcd-auto-tls"),
	downgrade("etcd --peer-auto-tls", "etcd: {local: {extraArgs: [{name: peer-auto-tls, value: 'true'}]}}\n",
		`"--peer-auto-tls=true": etcd would serve self-signed certificates that no client can verify`, "etcd-auto-tls"),
	downgrade("etcd http:// client URL", "etcd: {local: {extraArgs: [{name: advertise-client-urls, value: 'http://10.0.0.10:2379'}]}}\n",
		`etcd.local.extraArgs[0]: Invalid value: "--advertise-client-urls=http://10.0.0.10:2379": etcd would speak plain http, without TLS`, "etcd-plaintext"),
	downgrade("API server --authorization-mode=AlwaysAllow", "apiServer: {extraArgs: [{name: authorization-mode, value: AlwaysAllow}]}\n",
		`apiServer.extraArgs[0]: Invalid value: "--authorization-mode=AlwaysAllow": the API server would allow every request it authenticates, with neither Node nor RBAC authorization`, "apiserver-always-allow"),
	downgrade("kubelet readOnlyPort", "kubelet: {extraConfig: {readOnlyPort: 10255}}\n",
		`kubelet.extraConfig.readOnlyPort: Invalid value: "10255": the kubelet would serve pods and node details without authentication`, "kubelet-read-only-port"),
	downgrade("kubelet anonymous authentication", "kubelet: {extraConfig: {authentication: {anonymous: {enabled: true}}}}\n",
		`kubelet.extraConfig.authentication.anonymous.enabled: Invalid value: "true": the kubelet would take requests without credentials`, "kubelet-anonymous-auth"),
	downgrade("kubelet AlwaysAllow", "kubelet: {extraConfig: {authorization: {mode: AlwaysAllow}}}\n",
		`kubelet.extraConfig.authorization.mode: Invalid value: "AlwaysAllow": the kubelet would let any authenticated client exec into pods and read their logs`, "kubelet-always-allow"),
	{
		defect: "27.policy", name: "API server --anonymous-auth=true needs anonymousHealthChecksOnly off",
		setup: func(e env) []string {
			c := e.config("c.yaml", "apiServer: {extraArgs: [{name: anonymous-auth, value: 'true'}]}\n")
			return append([]string{"init", "--root", e.node, "--config", c}, skip...)
		},
		code: 2, message: `apiServer.extraArgs[0]: Invalid value: "--anonymous-auth=true": the API server would take anonymous requests everywhere, which security.anonymousHealthChecksOnly forbids`,
	},
	{
		defect: "27.policy", name: "an unknown security.allowInsecure name",
		setup: func(e env) []string {
			return append([]string{"init", "--root", e.node, "--config", e.config("c.yaml", "security: {allowInsecure: [all]}\n")}, skip...)
		},
		code: 2, message: `security.allowInsecure[0]: Unsupported value: "all"`,
	},
	optedOut("etcd --client-cert-auth=false with the opt-out",
		"etcd: {local: {extraArgs: [{name: client-cert-auth, value: 'false'}]}}\nsecurity: {allowInsecure: [etcd-client-cert-auth]}\n",
		"/etc/kubernetes/manifests/etcd.yaml", "--client-cert-auth=false"),
	optedOut("API server AlwaysAllow with the opt-out",
		"apiServer: {extraArgs: [{name: authorization-mode, value: AlwaysAllow}]}\nsecurity: {allowInsecure: [apiserver-always-allow]}\n",
		"/etc/kubernetes/manifests/kube-apiserver.yaml", "--authorization-mode=AlwaysAllow"),
	optedOut("kubelet readOnlyPort with the opt-out",
		"kubelet: {extraConfig: {readOnlyPort: 10255}}\nsecurity: {allowInsecure: [kubelet-read-only-port]}\n",
		"/var/lib/kubelet/config.yaml", "readOnlyPort: 10255"),
}

func TestHostilePolicy(t *testing.T) { runRows(t, policyRows) }
