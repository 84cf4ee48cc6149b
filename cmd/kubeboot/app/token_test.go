package app

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/tokens"
	"github.com/kubeboot/kubeboot/pki"
)

var tokenFormat = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)

// tokenNode is a node's config, CA and admin.conf under a temp dir, and a
// fake API server that the token commands reach instead of admin.conf's.
type tokenNode struct {
	deps   deps
	config string
	ca     []byte
	client *fake.Clientset
}

func newTokenNode(t *testing.T) tokenNode {
	t.Helper()
	dir := t.TempDir()
	node := filepath.Join(dir, "node")
	cfg := writeFile(t, dir, "cluster.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nclusterName: lab\n"+
		"node: {name: node1, advertiseAddress: 10.0.0.10}\ncontrolPlaneEndpoint: lb.example:443\n"+
		"certificates: {dir: "+node+"/pki}\npaths: {manifestsDir: "+node+"/manifests, kubeconfigDir: "+node+"}\n"+
		"etcd: {local: {dataDir: "+node+"/etcd}}\nbootstrapToken: {ttl: 3h}\n")
	ca, err := pki.NewCA(pki.CertSpec{Name: "ca", CN: "kubernetes", Algorithm: config.ECDSAP256, Validity: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(node, "pki"), 0o700))
	must(os.WriteFile(filepath.Join(node, "pki", "ca.crt"), ca.Cert, 0o644))
	must(os.WriteFile(filepath.Join(node, "admin.conf"), []byte("apiVersion: v1\nkind: Config\n"), 0o600))
	client := fake.NewClientset()
	d := newDeps("")
	d.adminClient = func([]byte) (kubernetes.Interface, error) { return client, nil }
	return tokenNode{deps: d, config: cfg, ca: ca.Cert, client: client}
}

func (n tokenNode) tokens(t *testing.T) []bootstraptoken.Info {
	t.Helper()
	list, err := n.client.CoreV1().Secrets("kube-system").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []bootstraptoken.Info
	for i := range list.Items {
		info, err := bootstraptoken.FromSecret(&list.Items[i])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, info)
	}
	return out
}

func TestTokenCreate(t *testing.T) {
	n := newTokenNode(t)
	start := time.Now()
	code, stdout, stderr := runCLIWith(t, n.deps, "token", "create", "--config", n.config)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	token := strings.TrimSuffix(stdout, "\n")
	if !tokenFormat.MatchString(token) {
		t.Fatalf("stdout %q is not a token", stdout)
	}
	tokens := n.tokens(t)
	if len(tokens) != 1 || tokens[0].Token.Value() != token || tokens[0].CreatedBy != "token-create" {
		t.Fatalf("tokens %v", tokens)
	}
	// The config's bootstrapToken.ttl is the default.
	if left := tokens[0].Expires.Sub(start); left < 3*time.Hour-time.Minute || left > 3*time.Hour+time.Minute {
		t.Errorf("expires in %s, want 3h", left)
	}
	secret := strings.SplitN(token, ".", 2)[1]
	if strings.Contains(stderr, secret) || !strings.Contains(stderr, "[token create] Secret kube-system/bootstrap-token-"+tokens[0].Token.ID+" created") {
		t.Errorf("stderr %q", stderr)
	}

	code, stdout, stderr = runCLIWith(t, n.deps, "token", "create", "--config", n.config, "--ttl", "2h", "--print-join-command")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	hash, err := pki.CACertHash(n.ca)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^kubeboot join lb\.example:443 --token ([a-z0-9.]{23}) --discovery-token-ca-cert-hash (sha256:[0-9a-f]{64})\n$`).FindStringSubmatch(stdout)
	if m == nil || m[2] != hash || !tokenFormat.MatchString(m[1]) {
		t.Fatalf("stdout %q, want the join command with CA pin %s", stdout, hash)
	}
	for _, tok := range n.tokens(t) {
		if tok.Token.Value() == m[1] {
			if left := tok.Expires.Sub(start); left < 2*time.Hour-time.Minute || left > 2*time.Hour+time.Minute {
				t.Errorf("--ttl 2h: expires in %s", left)
			}
		}
	}

	for _, ttl := range []string{"30s", "0", "-1h"} {
		if code, _, stderr := runCLIWith(t, n.deps, "token", "create", "--config", n.config, "--ttl", ttl); code != 2 || !strings.Contains(stderr, "at least 1m0s") {
			t.Errorf("--ttl %s: exit %d, %s", ttl, code, stderr)
		}
	}
	if got := len(n.tokens(t)); got != 2 {
		t.Errorf("%d tokens, want 2", got)
	}
}

// TestTokenCreateJSON: the secret is in the result and in no event.
func TestTokenCreateJSON(t *testing.T) {
	n := newTokenNode(t)
	code, stdout, stderr := runCLIWith(t, n.deps, "token", "create", "--config", n.config, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var last struct {
		Result struct {
			OK          bool
			ID          string
			Token       string
			Expires     time.Time
			JoinCommand string
		}
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	r := last.Result
	if !r.OK || !tokenFormat.MatchString(r.Token) || !strings.HasPrefix(r.Token, r.ID+".") || r.Expires.IsZero() || !strings.Contains(r.JoinCommand, "--token "+r.Token+" ") {
		t.Errorf("result %+v", r)
	}
	secret := strings.SplitN(r.Token, ".", 2)[1]
	for _, line := range lines[:len(lines)-1] {
		if strings.Contains(line, secret) {
			t.Errorf("an event shows the secret: %s", line)
		}
	}
	if len(lines) < 2 {
		t.Errorf("no progress event: %s", stdout)
	}
}

func TestTokenCreateDiscoveryFile(t *testing.T) {
	n := newTokenNode(t)
	path := filepath.Join(t.TempDir(), "discovery.conf")
	code, stdout, stderr := runCLIWith(t, n.deps, "token", "create", "--config", n.config, "--discovery-file", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	token := strings.TrimSpace(stdout)
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", info.Mode().Perm())
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("the write left %v", entries)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := clientcmd.NewDefaultClientConfig(*kubeconfig, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if rest.Host != "https://lb.example:443" || rest.BearerToken != token || string(rest.CAData) != string(n.ca) {
		t.Errorf("discovery file: host %s, token matches %v, CA matches %v", rest.Host, rest.BearerToken == token, string(rest.CAData) == string(n.ca))
	}
	expires := n.tokens(t)[0].Expires.Format(time.RFC3339)
	if !strings.Contains(stderr, "wrote the discovery file "+path+" (mode 0600); the token in it expires at "+expires) ||
		strings.Contains(stderr, strings.SplitN(token, ".", 2)[1]) {
		t.Errorf("stderr %q", stderr)
	}

	// A file that cannot be written leaves no token behind.
	code, _, stderr = runCLIWith(t, n.deps, "token", "create", "--config", n.config, "--discovery-file", "/proc/kubeboot-test.conf")
	if code == 0 || !strings.Contains(stderr, "--discovery-file: write") {
		t.Errorf("exit %d, %s", code, stderr)
	}
	if got := len(n.tokens(t)); got != 1 {
		t.Errorf("%d tokens after a failed write, want 1", got)
	}

	// A target that is no regular file is refused before any token is
	// created, and left as it is.
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--discovery-file", fifo}, {"--discovery-file", filepath.Join(n.config, "f.conf")}, {"--discovery-file", "-", "-o", "json"}} {
		code, _, stderr = runCLIWith(t, n.deps, append([]string{"token", "create", "--config", n.config}, args...)...)
		if code != 2 || !strings.Contains(stderr, "--discovery-file") {
			t.Errorf("%v: exit %d, %s", args, code, stderr)
		}
	}
	if info, err := os.Lstat(fifo); err != nil || info.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced: %v, %v", info, err)
	}
	if got := len(n.tokens(t)); got != 1 {
		t.Errorf("%d tokens after a refused target, want 1", got)
	}

	// - prints the discovery file to stdout, alone.
	code, stdout, stderr = runCLIWith(t, n.deps, "token", "create", "--config", n.config, "--discovery-file", "-")
	if code != 0 {
		t.Fatalf("--discovery-file -: exit %d, %s", code, stderr)
	}
	if kubeconfig, err := clientcmd.Load([]byte(stdout)); err != nil || kubeconfig.Clusters[kubeconfig.Contexts[kubeconfig.CurrentContext].Cluster].Server != "https://lb.example:443" {
		t.Errorf("--discovery-file - printed %q: %v", stdout, err)
	}
}

func TestTokenListAndDelete(t *testing.T) {
	n := newTokenNode(t)
	var created []string
	for range 2 {
		code, stdout, stderr := runCLIWith(t, n.deps, "token", "create", "--config", n.config)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		created = append(created, strings.TrimSpace(stdout))
	}
	code, stdout, stderr := runCLIWith(t, n.deps, "token", "list", "--config", n.config)
	if code != 0 || !strings.HasPrefix(stdout, "ID  ") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for _, tok := range created {
		id, secret, _ := strings.Cut(tok, ".")
		if !strings.Contains(stdout, id+"  ") || strings.Contains(stdout+stderr, secret) {
			t.Errorf("list shows %s wrongly:\n%s", id, stdout)
		}
	}
	code, stdout, _ = runCLIWith(t, n.deps, "token", "list", "--config", n.config, "-o", "json")
	var res struct {
		Result struct {
			OK     bool
			Tokens []tokens.Listed
		}
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &res) != nil || !res.Result.OK || len(res.Result.Tokens) != 2 {
		t.Fatalf("list -o json: %d %s", code, stdout)
	}
	if got := res.Result.Tokens[0]; got.Usages[0] != "authentication" || got.Groups[0] != bootstraptoken.NodeGroup || got.CreatedBy != "token-create" {
		t.Errorf("listed %+v", got)
	}
	for _, tok := range created {
		if strings.Contains(stdout, strings.SplitN(tok, ".", 2)[1]) {
			t.Errorf("list -o json shows a secret: %s", stdout)
		}
	}

	// By ID, and by the whole token.
	id0, _, _ := strings.Cut(created[0], ".")
	if code, _, stderr := runCLIWith(t, n.deps, "token", "delete", "--config", n.config, id0, created[1]); code != 0 || strings.Contains(stderr, strings.SplitN(created[1], ".", 2)[1]) {
		t.Fatalf("delete: exit %d, %s", code, stderr)
	}
	if got := n.tokens(t); len(got) != 0 {
		t.Errorf("after delete: %v", got)
	}
	if code, _, stderr := runCLIWith(t, n.deps, "token", "delete", "--config", n.config, id0); code != 1 || !strings.Contains(stderr, "no Secret kube-system/bootstrap-token-"+id0) {
		t.Errorf("deleting a deleted token: exit %d, %s", code, stderr)
	}
	mistyped := "abcdef.0123456789ABCDEF"
	if code, _, stderr := runCLIWith(t, n.deps, "token", "delete", "--config", n.config, mistyped); code != 2 || strings.Contains(stderr, "0123456789") {
		t.Errorf("a mistyped token: exit %d, %s", code, stderr)
	}
}

func TestTokenCommandsNeedAdminConf(t *testing.T) {
	n := newTokenNode(t)
	if err := os.Remove(filepath.Join(filepath.Dir(n.config), "node", "admin.conf")); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLIWith(t, n.deps, "token", "list", "--config", n.config)
	if code != 1 || !strings.Contains(stderr, "admin.conf") {
		t.Errorf("exit %d, %s", code, stderr)
	}
}

// TestTokenGenerate: token generate prints a new token, different each
// time, that a configuration's bootstrapTokens accepts, with no config,
// admin.conf or cluster to reach.
func TestTokenGenerate(t *testing.T) {
	d := newDeps("")
	d.adminClient = func([]byte) (kubernetes.Interface, error) {
		t.Fatal("token generate reached for the cluster")
		return nil, nil
	}
	seen := map[string]bool{}
	for range 20 {
		code, stdout, stderr := runCLIWith(t, d, "token", "generate")
		token := strings.TrimSuffix(stdout, "\n")
		if code != 0 || stderr != "" || !tokenFormat.MatchString(token) {
			t.Fatalf("code %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		if seen[token] {
			t.Fatalf("token generate printed %s twice", token)
		}
		seen[token] = true
		cfg := writeFile(t, t.TempDir(), "cluster.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\nbootstrapTokens: [{token: "+token+"}]\n")
		if _, err := config.Load(cfg, config.Env{Host: config.Host{Name: "node1", Address: "10.0.0.10"}}); err != nil {
			t.Fatalf("the configuration refuses the generated token: %v", err)
		}
	}
	if code, _, stderr := runCLI(t, "token", "generate", "extra"); code != 2 || stderr == "" {
		t.Errorf("an argument: code %d, stderr %q", code, stderr)
	}
}

// TestTokenCommandsNeverEchoATokenArgument: a token given where a token
// command takes none, or as a flag's value, is refused with the usage exit
// code and an error that says what the command takes, without the token.
func TestTokenCommandsNeverEchoATokenArgument(t *testing.T) {
	const token, secret = "abcdef.0123456789abcdef", "0123456789abcdef"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"token", "create", token}, "kubeboot token create takes no arguments: it generates the token (to choose a token, list it in the configuration's bootstrapTokens"},
		{[]string{"token", token}, "kubeboot token takes a subcommand: create, delete, generate or list; got 1 argument (not shown"},
		{[]string{"token", "list", token}, "kubeboot token list takes no arguments; got 1 argument"},
		{[]string{"token", "generate", token}, "kubeboot token generate takes no arguments"},
		{[]string{"token", "delete"}, "kubeboot token delete takes one or more token IDs or tokens"},
		{[]string{"token", "create", "--ttl", token}, "--ttl: the value given is no valid duration (not shown"},
		{[]string{"token", "create", "--ttl=" + token}, "--ttl: the value given is no valid duration"},
		{[]string{"token", "list", "-o", token}, "--output: the value given is no valid text|json"},
		{[]string{"token", "create", "-" + token}, `unknown shorthand flag "a"`},
		{[]string{"token", "create", "-" + token + "o"}, `unknown shorthand flag "a"`},
	} {
		code, stdout, stderr := runCLI(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("kubeboot %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
		if strings.Contains(stdout+stderr, secret) {
			t.Errorf("kubeboot %s shows the token's secret: %s%s", strings.Join(tc.args, " "), stdout, stderr)
		}
	}
}

// TestTokenKubeconfigOrConfig: the token commands take the node's
// configuration or an administrator's kubeconfig, not both, and a
// kubeconfig that cannot be read is a usage error naming it.
func TestTokenKubeconfigOrConfig(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "admin.conf")
	if code, _, stderr := runCLI(t, "token", "list", "--config", "cluster.yaml", "--kubeconfig", missing); code != 2 || !strings.Contains(stderr, "--config and --kubeconfig: give one") {
		t.Errorf("both: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, "token", "create", "--kubeconfig", missing); code != 2 || !strings.Contains(stderr, "--kubeconfig: stat "+missing) {
		t.Errorf("a missing kubeconfig: exit %d: %s", code, stderr)
	}
}

// TestKubeconfigClient: --kubeconfig's client is built from the file's
// bytes; a FIFO is refused before it is read (no command blocks on it),
// and a file no client can be built from is a usage error naming it.
func TestKubeconfigClient(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "admin.conf", "from the admin's machine")
	d := newDeps("")
	var built string
	d.adminClient = func(data []byte) (kubernetes.Interface, error) {
		built = string(data)
		return fake.NewClientset(), nil
	}
	if _, err := d.kubeconfigClient(path); err != nil || built != "from the admin's machine" {
		t.Errorf("client built from %q: %v", built, err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.kubeconfigClient(fifo); exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), "--kubeconfig: ") {
		t.Errorf("a FIFO as --kubeconfig: %v", err)
	}
	d.adminClient = func([]byte) (kubernetes.Interface, error) { return nil, errors.New("no cluster in it") }
	if _, err := d.kubeconfigClient(path); exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), "--kubeconfig "+path+": no cluster in it") {
		t.Errorf("a kubeconfig no client is built from: %v", err)
	}
}
