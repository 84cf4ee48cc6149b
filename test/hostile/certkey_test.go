package hostile

import (
	"strings"
	"testing"
)

// certKeyRows are careless uses of certificate keys: each is refused
// before anything runs, exit 2, and the key is never echoed.
var certKeyRows = []row{
	{
		defect: "32", name: "join --certificate-key without --control-plane",
		setup: func(env) []string {
			return []string{"join", "10.0.0.10:6443", "--token", "abcdef.0123456789abcdef", "--discovery-token-ca-cert-hash", "sha256:" + strings.Repeat("ab", 32), "--certificate-key", strings.Repeat("cd", 32)}
		},
		code: 2, message: "--certificate-key join a control-plane node: pass --control-plane",
		check: func(e env, res result) {
			if strings.Contains(res.stderr, strings.Repeat("cd", 32)) {
				e.t.Errorf("the key is echoed: %s", res.stderr)
			}
		},
	},
	{
		defect: "32", name: "join --control-plane with a malformed --certificate-key",
		setup: func(e env) []string {
			c := e.path("join.yaml")
			writeFile(e.t, c, "apiVersion: kubeboot.io/v1alpha1\nkind: JoinConfiguration\ncontrolPlaneEndpoint: 10.0.0.10:6443\n", 0o600)
			return []string{"join", "--control-plane", "--config", c, "--token", "abcdef.0123456789abcdef", "--discovery-token-ca-cert-hash", "sha256:" + strings.Repeat("ab", 32), "--certificate-key", "s3cr3t-not-hex"}
		},
		code: 2, message: `--certificate-key: Invalid value: "(hidden)": want 64 lowercase hex digits`,
		check: func(e env, res result) {
			if strings.Contains(res.stderr, "s3cr3t") {
				e.t.Errorf("the key is echoed: %s", res.stderr)
			}
		},
	},
	{
		defect: "32", name: "init refuses a certificateKey that is no key, without echoing it",
		setup: func(e env) []string {
			c := e.config("c.yaml", "certificateKey: s3cr3t-not-hex\n")
			return append([]string{"init", "--root", e.node, "--config", c}, skip...)
		},
		code: 2, message: `certificateKey: Invalid value: "(hidden)"`,
		check: func(e env, res result) {
			if strings.Contains(res.stderr, "s3cr3t") {
				e.t.Errorf("the key is echoed: %s", res.stderr)
			}
		},
	},
}

func TestCertificateKeys(t *testing.T) { runRows(t, certKeyRows) }
