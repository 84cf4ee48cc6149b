package hostile

import (
	"strings"
	"testing"
	"time"
)

// refusedAtOnce is a row in which kubeboot, on an initialised node whose
// etcd does not run, refuses the user's mistake in args with exit 2 and
// message, which names the flag and the fix, well before a dial could
// have timed out.
func refusedAtOnce(name, message string, args func(e env) []string) row {
	return row{
		defect: "6", name: name,
		setup: func(e env) []string {
			e.initNode()
			return append(args(e), "--root", e.node, "--config", e.config("c.yaml", ""))
		},
		code: 2, message: message, within: 2 * time.Second,
	}
}

// badEndpoint is a row: an etcd command given --endpoint, which is no
// client URL, on an initialised node.
func badEndpoint(endpoint string, command ...string) row {
	return refusedAtOnce(strings.Join(command, " ")+" --endpoint "+endpoint, `--endpoint "`+endpoint+`": not an etcd client URL (http or https, host:port, no path): give one like https://10.0.0.10:2379`,
		func(env) []string { return append(command, "--endpoint", endpoint) })
}

// exitCodeRows are the class 6 cases of flags: user mistakes exit
// 2 before any network dial, naming the flag and the fix.
var exitCodeRows = []row{
	refusedAtOnce("etcd snapshot save --out in a directory that does not exist", "--out does-not-exist/s.db: the directory does-not-exist does not exist: create it first, or name a file in an existing directory",
		func(env) []string { return []string{"etcd", "snapshot", "save", "--out", "does-not-exist/s.db"} }),
	badEndpoint("not a url", "etcd", "snapshot", "save"),
	badEndpoint("http://", "etcd", "snapshot", "save"),
	badEndpoint("https://host:99999", "etcd", "snapshot", "save"),
	badEndpoint("not a url", "etcd", "members"),
	badEndpoint("http://", "etcd", "members", "list"),
	badEndpoint("https://host:99999", "etcd", "members", "remove", "cp2"),
	{
		defect: "6", name: "etcd snapshot schedule --endpoint https://host:99999",
		setup: func(e env) []string {
			return []string{"etcd", "snapshot", "schedule", "--endpoint", "https://host:99999", "--cacert", e.path("ca.crt"), "--cert", e.path("c.crt"), "--key", e.path("c.key"), "--dir", e.path("snapshots")}
		},
		code: 2, message: `--endpoint "https://host:99999": not an etcd client URL`, within: 2 * time.Second,
	},
	{
		defect: "6", name: "join --control-plane --certificate-key malformed names the flag",
		setup: func(e env) []string {
			c := e.path("join.yaml")
			writeFile(e.t, c, "apiVersion: kubeboot.io/v1alpha1\nkind: JoinConfiguration\ncontrolPlaneEndpoint: 10.0.0.10:6443\n", 0o600)
			return []string{"join", "--control-plane", "--config", c, "--token", token, "--discovery-token-ca-cert-hash", "sha256:" + strings.Repeat("ab", 32), "--certificate-key", "s3cr3t-not-hex"}
		},
		code: 2, message: `--certificate-key: Invalid value: "(hidden)": want 64 lowercase hex digits, as ` + "`kubeboot certs certificate-key`" + ` prints them`, within: 2 * time.Second,
		check: func(e env, res result) {
			if strings.Contains(res.stderr, "join.certificateKey") || strings.Contains(res.stderr, "s3cr3t") {
				e.t.Errorf("names the field the user did not set, or echoes the key: %s", res.stderr)
			}
		},
	},
}

func TestHostileExitCodes(t *testing.T) { runRows(t, exitCodeRows) }
