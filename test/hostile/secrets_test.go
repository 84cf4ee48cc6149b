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
	return row{
		defect: "3", name: name,
		setup: func(env) []string { return args },
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
	refusedSecret("token delete of a mistyped token", "argument 1 is neither a token ID", "token", "delete", "abcdef.0123456789abcdeF"),
	refusedSecret("an S3 endpoint with the secret key in it", `s3.endpoint: "https://xxxxx@s3.example.com:9000" is not the store's https URL`,
		schedule("https://AKIAIOSFODNN7EXAMPLE:"+s3Secret+"@s3.example.com:9000")...),
	refusedSecret("an S3 endpoint with the secret key as its user", `"https://xxxxx@s3.example.com" is not the store's https URL`,
		schedule("https://"+s3Secret+"@s3.example.com")...),
	refusedSecret("an S3 endpoint that does not parse, with the secret key in it", "s3.endpoint: (not shown: it is no URL",
		schedule("https://AKIAIOSFODNN7EXAMPLE:"+s3Secret+" @s3.example.com")...),
	refusedSecret("an S3 endpoint with a presigned query", `"https://s3.example.com/?xxxxx" is not the store's https URL`,
		schedule("https://s3.example.com/?X-Amz-Credential="+s3Secret)...),
}

func TestSecretsNeverEchoed(t *testing.T) { runRows(t, secretRows) }
