package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeboot/kubeboot/bootstraptoken"
)

const (
	workerHeader = "apiVersion: kubeboot.io/v1alpha1\nkind: WorkerConfiguration\n"
	testToken    = "abcdef.0123456789abcdef"
	testHash     = "sha256:fbc3df3e8c0de084d015658c5f70833f5d6563be1a7bf314ee008db5c7ae60a3"
)

func TestLoadWorkerDefaults(t *testing.T) {
	host := Host{Name: "worker1", Address: "10.0.0.20"}
	w, err := LoadWorker(writeConfig(t, workerHeader+"discovery:\n  apiServerEndpoint: 10.0.0.10:6443\n  token: "+testToken+
		"\n  caCertHashes: [SHA256:FBC3DF3E8C0DE084D015658C5F70833F5D6563BE1A7BF314EE008DB5C7AE60A3]\n"), host, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &WorkerConfiguration{
		Node: WorkerNode{Name: "worker1"},
		Discovery: Discovery{APIServerEndpoint: "10.0.0.10:6443", Token: testToken,
			CACertHashes: []string{testHash}},
		Certificates: WorkerCertificates{Dir: DefaultCertificatesDir},
		Paths:        Paths{ManifestsDir: DefaultManifestsDir, KubeconfigDir: DefaultKubeconfigDir},
		Kubelet:      WorkerKubelet{ConfigFile: DefaultKubeletConfigFile, ContainerRuntimeEndpoint: DefaultCRIEndpoint},
		Timeouts:     WorkerTimeouts{Discovery: duration(5 * time.Minute), TLSBootstrap: duration(5 * time.Minute)},
	}
	want.APIVersion, want.Kind = APIVersion, KindWorkerConfiguration
	if diff := cmp.Diff(want, w); diff != "" {
		t.Errorf("loaded (-want +got):\n%s", diff)
	}
	// The node address is not guessed: the kubelet chooses, as with kubeadm.
	if w.NodeConfig().Node.AdvertiseAddress != "" || w.NodeConfig().Paths.KubeconfigDir != DefaultKubeconfigDir {
		t.Errorf("NodeConfig = %+v", w.NodeConfig())
	}
}

func TestLoadWorkerFlagsWin(t *testing.T) {
	path := writeConfig(t, workerHeader+"node: {name: from-file}\ndiscovery: {file: /etc/kubeboot/discovery.conf}\n")
	w, err := LoadWorker(path, testHost, func(w *WorkerConfiguration) {
		w.Node.Name = "from-flag"
		w.Discovery.Token = testToken // the TLS bootstrap token beside a discovery file
	})
	if err != nil {
		t.Fatal(err)
	}
	if w.Node.Name != "from-flag" || w.Discovery.File != "/etc/kubeboot/discovery.conf" || w.Discovery.Token != testToken {
		t.Errorf("loaded %+v", w)
	}
	// Without a file, the flags alone.
	w, err = LoadWorker("", testHost, func(w *WorkerConfiguration) { w.Discovery.File = "/d.conf" })
	if err != nil || w.Node.Name != "node1" {
		t.Fatalf("LoadWorker(\"\") = %+v, %v", w, err)
	}
	if _, err := LoadWorker("", testHost, nil); err == nil || !strings.HasPrefix(err.Error(), "invalid config (command line):\n  discovery: Required value") {
		t.Errorf("LoadWorker without a file or flags: %v", err)
	}
}

func TestLoadWorkerRefuses(t *testing.T) {
	token := "discovery: {apiServerEndpoint: 10.0.0.10:6443, token: " + testToken + ", caCertHashes: [" + testHash + "]}\n"
	tests := []struct {
		name, text, want string
	}{
		{"no discovery", workerHeader, "discovery: Required value: pass ENDPOINT --token T --discovery-token-ca-cert-hash sha256:H"},
		{"no pin", workerHeader + "discovery: {apiServerEndpoint: 10.0.0.10:6443, token: " + testToken + "}\n",
			"discovery.caCertHashes: Required value: pin the cluster CA with --discovery-token-ca-cert-hash"},
		{"no token", workerHeader + "discovery: {apiServerEndpoint: 10.0.0.10:6443, caCertHashes: [" + testHash + "]}\n", "discovery.token: Required value"},
		{"no endpoint", workerHeader + "discovery: {token: " + testToken + ", caCertHashes: [" + testHash + "]}\n", "discovery.apiServerEndpoint: Required value"},
		{"endpoint without port", workerHeader + "discovery: {apiServerEndpoint: 10.0.0.10, token: " + testToken + ", caCertHashes: [" + testHash + "]}\n",
			`line 3: discovery.apiServerEndpoint: Invalid value: "10.0.0.10": want host:port`},
		{"bad pin", workerHeader + "discovery: {apiServerEndpoint: 10.0.0.10:6443, token: " + testToken + ", caCertHashes: [md5:1234]}\n",
			`discovery.caCertHashes[0]: Invalid value: "md5:1234": want sha256:<64 hex digits>`},
		{"file and pin", workerHeader + "discovery: {file: /d.conf, caCertHashes: [" + testHash + "]}\n", "discovery.caCertHashes: Forbidden: a discovery file"},
		{"file and endpoint", workerHeader + "discovery: {file: /d.conf, apiServerEndpoint: a:1}\n", "discovery.apiServerEndpoint: Forbidden"},
		{"relative file", workerHeader + "discovery: {file: d.conf}\n", "discovery.file: Invalid value: \"d.conf\": must be an absolute path"},
		{"loopback address", workerHeader + token + "node: {address: 127.0.0.5}\n", "node.address: Invalid value: \"127.0.0.5\": the kubelet refuses"},
		{"zero timeout", workerHeader + token + "timeouts: {tlsBootstrap: 0s}\n", "timeouts.tlsBootstrap: Invalid value: \"0s\": must be positive"},
		{"system dir", workerHeader + token + "certificates: {dir: /etc}\n", "certificates.dir: Invalid value: \"/etc\": a system directory"},
		{"kubelet extraConfig of the wrong type", workerHeader + token + "kubelet: {extraConfig: {failSwapOn: notabool}}\n", `kubelet.extraConfig.failSwapOn: Invalid value: "string": wrong type: the kubelet wants bool`},
		{"the kubelet's read-only port", workerHeader + token + "kubelet: {extraConfig: {readOnlyPort: 10255}}\n",
			`kubelet.extraConfig.readOnlyPort: Invalid value: "10255": the kubelet would serve pods and node details without authentication: kubeboot refuses this downgrade on a worker`},
		{"the kubelet's anonymous auth", workerHeader + token + "kubelet: {extraConfig: {authentication: {anonymous: {enabled: true}}}}\n",
			"kubelet.extraConfig.authentication.anonymous.enabled: Invalid value: \"true\""},
		{"kubeconfigs among the manifests", workerHeader + token + "paths: {kubeconfigDir: /etc/kubernetes/manifests}\n", "paths.kubeconfigDir: Invalid value: \"/etc/kubernetes/manifests\": /etc/kubernetes/manifests would be both the kubeconfig directory and the manifest directory (paths.manifestsDir)"},
		{"unknown field", workerHeader + token + "node: {advertiseAddress: 10.0.0.20}\n", "node.advertiseAddress: unknown field"},
		{"a control-plane field", workerHeader + token + "etcd: {}\n", "etcd: unknown field"},
		{"a JoinConfiguration", "apiVersion: kubeboot.io/v1alpha1\nkind: JoinConfiguration\n", "a JoinConfiguration is for `kubeboot join --control-plane`; this command takes a WorkerConfiguration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadWorker(writeConfig(t, tt.text), testHost, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	// The other commands name the command that takes a WorkerConfiguration.
	for name, load := range map[string]func(string) error{
		"init":                   func(p string) error { _, err := Load(p, testHost); return err },
		"join --control-plane":   func(p string) error { _, err := LoadJoin(p, testHost); return err },
		"any control-plane node": func(p string) error { _, err := LoadAny(p, testHost); return err },
	} {
		if err := load(writeConfig(t, workerHeader+token)); err == nil || !strings.Contains(err.Error(), "a WorkerConfiguration is for `kubeboot join`") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestLoadWorkerNeverQuotesTheToken: a mistyped token is still a secret.
func TestLoadWorkerNeverQuotesTheToken(t *testing.T) {
	const almost = "abcdef.0123456789abcdeX"
	_, err := LoadWorker(writeConfig(t, workerHeader+"discovery: {apiServerEndpoint: a:1, token: "+almost+", caCertHashes: ["+testHash+"]}\n"), testHost, nil)
	if err == nil || !strings.Contains(err.Error(), "line 3: discovery.token: Invalid value: not a bootstrap token (--token)") {
		t.Fatalf("got %v, want the token refused", err)
	}
	if strings.Contains(err.Error(), "0123456789abcde") {
		t.Errorf("the error quotes the token: %v", err)
	}
}

// TestTokenPatternMatchesBootstraptoken keeps config's copy of the token
// format in step with bootstraptoken's.
func TestTokenPatternMatchesBootstraptoken(t *testing.T) {
	for _, s := range []string{testToken, "abcdef.0123456789abcdeF", "abcde.0123456789abcdef0", "abcdef0123456789abcdef", "", "abcdef.0123456789abcdef\n"} {
		_, err := bootstraptoken.Parse(s)
		if got := tokenPattern.MatchString(s); got != (err == nil) {
			t.Errorf("%q: config accepts %t, bootstraptoken %t", s, got, err == nil)
		}
	}
}

func TestCheckFile(t *testing.T) {
	// A worker's file may leave the discovery to the command line.
	if err := CheckFile(writeConfig(t, workerHeader+"node: {name: worker1}\n"), testHost); err != nil {
		t.Errorf("a WorkerConfiguration without discovery: %v", err)
	}
	if err := CheckFile(writeConfig(t, workerHeader+"node: {name: Worker_1}\n"), testHost); err == nil || !strings.Contains(err.Error(), "node.name") {
		t.Errorf("an invalid WorkerConfiguration: %v", err)
	}
	if err := CheckFile(writeConfig(t, header), testHost); err != nil {
		t.Errorf("a ClusterConfiguration: %v", err)
	}
	if err := CheckFile(writeConfig(t, joinHeader+"controlPlaneEndpoint: 10.0.0.10\n"), testHost); err == nil || !strings.Contains(err.Error(), "join.etcdEndpoints") {
		t.Errorf("an invalid JoinConfiguration: %v", err)
	}
}

func duration(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }
