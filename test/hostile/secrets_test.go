package hostile

import (
	"strings"
	"testing"
)

// The secrets the rows give kubeboot: a bootstrap token (its secret half)
// and an S3 secret access key.
const (
	token       = "abcdef.0123456789abcdef"
	tokenSecret = "0123456789abcdef"
	s3Secret    = "wJalrXUtnFEMI0K7MDENG0bPxRfiCYEXAMPLEKEY"
)

// refusedSecret is a row in which kubeboot refuses args with exit 2 and
// message, and neither its stdout nor its stderr shows a secret.
func refusedSecret(name, message string, args ...string) row {
	return refusedSecretIn(name, message, func(env) []string { return args })
}

// refusedSecretIn is refusedSecret with the arguments setup returns.
func refusedSecretIn(name, message string, setup func(e env) []string) row {
	return row{
		defect: "3", name: name,
		setup: setup,
		code:  2, message: message,
		check: func(e env, res result) {
			for _, secret := range []string{tokenSecret, s3Secret} {
				if strings.Contains(res.stdout+res.stderr, secret) {
					e.t.Errorf("the output shows the secret %s:\n%s%s", secret, res.stdout, res.stderr)
				}
			}
		},
	}
}

// schedule is `etcd snapshot schedule` with the S3 endpoint endpoint,
// which it refuses before it reaches etcd or the store.
func schedule(endpoint string) []string {
	return []string{"etcd", "snapshot", "schedule", "--endpoint", "https://127.0.0.1:2379", "--cacert", "/nonexistent/ca.crt",
		"--cert", "/nonexistent/c.crt", "--key", "/nonexistent/c.key", "--node-name", "cp1",
		"--s3-endpoint", endpoint, "--s3-bucket", "backups", "--s3-credentials-file", "/nonexistent/credentials"}
}

// initWithS3 is init with a configuration whose scheduled snapshots go
// to the S3 endpoint endpoint, which init refuses before it writes.
func initWithS3(endpoint string) func(e env) []string {
	return func(e env) []string {
		c := e.config("c.yaml", "etcd:\n  local:\n    scheduledSnapshots:\n      s3: {endpoint: '"+endpoint+"', bucket: backups, credentialsFile: /etc/kubeboot/s3-credentials}\n")
		return append([]string{"init", "--root", e.node, "--config", c}, skip...)
	}
}

// secretRows are the class 3: bad invocations that hold a
// secret, each refused without the secret in its output.
var secretRows = []row{
	refusedSecret("kubeadm's token create <token>", "kubeboot token create takes no arguments: it generates the token", "token", "create", token),
	refusedSecret("token <token>", "kubeboot token takes a subcommand", "token", token),
	refusedSecret("token list <token>", "kubeboot token list takes no arguments", "token", "list", token),
	refusedSecret("token generate <token>", "kubeboot token generate takes no arguments", "token", "generate", token),
	refusedSecret("token create --ttl <token>", "--ttl: the value given is no valid duration", "token", "create", "--ttl", token),
	refusedSecret("token create --ttl=<token>", "--ttl: the value given is no valid duration", "token", "create", "--ttl="+token),
	refusedSecret("token create -o <token>", "--output: the value given is no valid text|json", "token", "create", "-o", token),
	refusedSecret("token create -<token>", `unknown shorthand flag "a"`, "token", "create", "-"+token),
	refusedSecret("token delete of a mistyped token", "argument 1 is neither a token ID", "token", "delete", token+"0"),
	refusedSecret("an S3 endpoint with the secret key in it", `s3.endpoint: "https://xxxxx@s3.example.com:9000" is not the store's https URL`,
		schedule("https://AKIAIOSFODNN7EXAMPLE:"+s3Secret+"@s3.example.com:9000")...),
	refusedSecret("an S3 endpoint with the secret key as its user", `"https://xxxxx@s3.example.com" is not the store's https URL`,
		schedule("https://"+s3Secret+"@s3.example.com")...),
	refusedSecret("an S3 endpoint that does not parse, with the secret key in it", "s3.endpoint: (not shown: it is no URL",
		schedule("https://AKIAIOSFODNN7EXAMPLE:"+s3Secret+" @s3.example.com")...),
	refusedSecret("an S3 endpoint with a presigned query", `"https://s3.example.com/?xxxxx" is not the store's https URL`,
		schedule("https://s3.example.com/?X-Amz-Credential="+s3Secret)...),
	refusedSecret("kubeboot <token>", "kubeboot takes a subcommand: ", token),
	refusedSecret("init <token>", "kubeboot init takes no arguments, or a subcommand: phase; got 1 argument (not shown", "init", token),
	refusedSecret("join ENDPOINT <token>", "got 2 arguments (not shown", "join", "10.0.0.10:6443", token),
	refusedSecret("completion bash <token>", "kubeboot completion bash takes no arguments", "completion", "bash", token),
	refusedSecret("init --dry-run=<token>", "--dry-run: the value given is no valid bool (not shown", "init", "--dry-run="+token),
	refusedSecret("init --<token>", "unknown flag (not shown", "init", "--"+token),
	refusedSecret("init ---<token>", "bad flag syntax (not shown", "init", "---"+token),
	refusedSecret("init -<token>", `unknown shorthand flag "a"`, "init", "-"+token),
	refusedSecretIn("init with an S3 endpoint with the secret key in it", `s3.endpoint: Invalid value: "https://xxxxx@s3.example.com:9000"`,
		initWithS3("https://AKIAIOSFODNN7EXAMPLE:"+s3Secret+"@s3.example.com:9000")),
	refusedSecretIn("init with an S3 endpoint that does not parse, with the secret key in it", `s3.endpoint: Invalid value: "(hidden)"`,
		initWithS3("https://AKIAIOSFODNN7EXAMPLE:"+s3Secret+" @s3.example.com:9000")),
	refusedSecretIn("init with an S3 endpoint with a presigned query", `s3.endpoint: Invalid value: "https://s3.example.com/?xxxxx"`,
		initWithS3("https://s3.example.com/?X-Amz-Credential="+s3Secret)),
	refusedSecretIn("init with an external etcd endpoint with a password in it", `endpoints[0]: Invalid value: "htps://xxxxx@10.0.0.2:2379"`, func(e env) []string {
		c := e.config("c.yaml", "etcd: {external: {endpoints: ['htps://root:"+s3Secret+"@10.0.0.2:2379'], caFile: /etc/e/ca.crt, certFile: /etc/e/c.crt, keyFile: /etc/e/c.key}}\n")
		return append([]string{"init", "--root", e.node, "--config", c}, skip...)
	}),
	refusedSecret("join with the token as --discovery-token-ca-cert-hash", `caCertHashes[0]: Invalid value: "(hidden)"`,
		"join", "10.0.0.10:6443", "--token", token, "--discovery-token-ca-cert-hash", token),
	refusedSecret("join with the token as --discovery-token-ca-cert-hash sha256:<token>", `caCertHashes[0]: Invalid value: "(hidden)"`,
		"join", "10.0.0.10:6443", "--token", token, "--discovery-token-ca-cert-hash", "sha256:"+token),
	refusedSecret("join with the token as the endpoint", `apiServerEndpoint: Invalid value: "(hidden)"`,
		"join", token, "--token", token, "--discovery-token-ca-cert-hash", "sha256:"+strings.Repeat("ab", 32)),
	refusedSecret("join with a mistyped --token", "discovery.token: Invalid value",
		"join", "10.0.0.10:6443", "--token", token+"0", "--discovery-token-ca-cert-hash", "sha256:"+strings.Repeat("ab", 32)),
	refusedSecret("init --skip-phases <token>", `unknown phase "abcdef.****************" in --skip-phases`, "init", "--skip-phases", token),
	refusedSecret("upgrade plan <token>", `upgrade plan VERSION "abcdef.****************": want a release version`, "upgrade", "plan", token),
	refusedSecret("certs renew <token>", `unknown certificate or kubeconfig "abcdef.****************"`, "certs", "renew", token),
	refusedSecret("validate <token>", `validate "abcdef.****************": no such file or directory`, "validate", token),
	refusedSecret("init --config <token>", "invalid config abcdef.****************", "init", "--config", token),
	refusedSecret("lab up --cluster <token>", "abcdef.****************: no such file or directory", "lab", "up", "--cluster", token),
	refusedSecretIn("init with a mistyped bootstrap token", `bootstrapTokens[0].token: Invalid value: "abcdef.…"`, func(e env) []string {
		c := e.config("c.yaml", "bootstrapTokens: [{token: "+token+"0, ttl: 1h}]\n")
		return append([]string{"init", "--root", e.node, "--config", c}, skip...)
	}),
}

func TestSecretsNeverEchoed(t *testing.T) { runRows(t, secretRows) }
