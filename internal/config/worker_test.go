package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/exit"
)

const (
	workerHeader = "apiVersion: kubeboot.io/v1alpha1\nkind: WorkerConfiguration\n"
	testToken    = "abcdef.0123456789abcdef"
	testHash     = "sha256:fbc3df3e8c0de084d015658c5f70833f5d6563be1a7bf314ee008db5c7ae60a3"
)

func TestLoadWorkerDefaults(t *testing.T) {
	host := Host{Name: "worker1", Address: "10.0.0.20"}
	w, err := loadWorkerJoin(writeConfig(t, workerHeader+"discovery:\n  apiServerEndpoint: 10.0.0.10:6443\n  token: "+testToken+
		"\n  caCertHashes: [SHA256:FBC3DF3E8C0DE084D015658C5F70833F5D6563BE1A7BF314EE008DB5C7AE60A3]\n"), host, WorkerFlags{})
	if err != nil {
		t.Fatal(err)
	}
	want := &WorkerConfiguration{
		Node: WorkerRegistration{Name: "worker1"},
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
	if w.ownedPaths().Node.AdvertiseAddress != "" || w.ownedPaths().Paths.KubeconfigDir != DefaultKubeconfigDir {
		t.Errorf("ownedPaths = %+v", w.ownedPaths())
	}
}

func TestLoadWorkerFlagsWin(t *testing.T) {
	path := writeConfig(t, workerHeader+"node: {name: from-file}\ndiscovery: {file: /etc/kubeboot/discovery.conf}\n")
	w, err := loadWorkerJoin(path, testHost, WorkerFlags{
		NodeName:  "from-flag",
		Discovery: Discovery{Token: testToken}, // the TLS bootstrap token beside a discovery file
	})
	if err != nil {
		t.Fatal(err)
	}
	if w.Node.Name != "from-flag" || w.Discovery.File != "/etc/kubeboot/discovery.conf" || w.Discovery.Token != testToken {
		t.Errorf("loaded %+v", w)
	}
	// Without a file, the flags alone.
	w, err = loadWorkerJoin("", testHost, WorkerFlags{Discovery: Discovery{File: "/d.conf"}})
	if err != nil || w.Node.Name != "node1" {
		t.Fatalf("a worker's join without a file = %+v, %v", w, err)
	}
	if _, err := loadWorkerJoin("", testHost, WorkerFlags{}); err == nil || !strings.HasPrefix(err.Error(), "invalid config (command line):\n  discovery: Required value") {
		t.Errorf("a worker's join without a file or flags: %v", err)
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
		{"secondary address without address", workerHeader + token + "node: {secondaryAddress: 'fd00:89::20'}\n", "node.address: Required value: a secondaryAddress needs the node's first address too: set address"},
		{"secondary address of the same family", workerHeader + token + "node: {address: 'fd00:89::20', secondaryAddress: 'fd00:89::21'}\n", `node.secondaryAddress: Invalid value: "fd00:89::21": of the same IP family as address (fd00:89::20)`},
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
			_, err := loadWorkerJoin(writeConfig(t, tt.text), testHost, WorkerFlags{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	// The other commands name the command that takes a WorkerConfiguration.
	for name, load := range map[string]func(string) error{
		"init":                   func(p string) error { _, err := loadInit(p, testHost); return err },
		"join --control-plane":   func(p string) error { _, err := loadJoinFile(p, testHost); return err },
		"any control-plane node": func(p string) error { _, err := loadNode(p, testHost); return err },
	} {
		if err := load(writeConfig(t, workerHeader+token)); err == nil || !strings.Contains(err.Error(), "a WorkerConfiguration is for `kubeboot join`") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestLoadWorkerNeverQuotesTheToken: a mistyped token is still a secret.
func TestLoadWorkerNeverQuotesTheToken(t *testing.T) {
	const almost = "abcdef.0123456789abcdeX"
	_, err := loadWorkerJoin(writeConfig(t, workerHeader+"discovery: {apiServerEndpoint: a:1, token: "+almost+", caCertHashes: ["+testHash+"]}\n"), testHost, WorkerFlags{})
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

// TestLoadAnyKind: without Kinds, as config validate and the lab load, a
// file of every kind loads as what it is, and a worker's file may leave
// the discovery to the command line.
func TestLoadAnyKind(t *testing.T) {
	env := Env{Host: testHost}
	doc, err := Load(writeConfig(t, workerHeader+"node: {name: worker1}\n"), env)
	if err != nil || doc.Kind() != KindWorkerConfiguration || doc.Worker.Node.Name != "worker1" || doc.ControlPlane() != nil {
		t.Errorf("a WorkerConfiguration without discovery: %+v, %v", doc, err)
	}
	if _, err := Load(writeConfig(t, workerHeader+"node: {name: Worker_1}\n"), env); err == nil || !strings.Contains(err.Error(), "node.name") {
		t.Errorf("an invalid WorkerConfiguration: %v", err)
	}
	if doc, err := Load(writeConfig(t, header), env); err != nil || doc.Kind() != KindClusterConfiguration || doc.ControlPlane() != doc.Cluster {
		t.Errorf("a ClusterConfiguration: %+v, %v", doc, err)
	}
	if _, err := Load(writeConfig(t, joinHeader+"controlPlaneEndpoint: 10.0.0.10\njoin: {etcdEndpoints: [http://10.0.0.11:2379]}\n"), env); err == nil || !strings.Contains(err.Error(), "join.etcdEndpoints") {
		t.Errorf("an invalid JoinConfiguration: %v", err)
	}
	doc, err = Load(writeConfig(t, joinHeader+"controlPlaneEndpoint: 10.0.0.10\njoin: {etcdEndpoints: [https://10.0.0.11:2379]}\n"), env)
	if err != nil || doc.Kind() != KindJoinConfiguration || doc.ControlPlane() != &doc.Join.ClusterConfiguration || doc.Cluster != nil || doc.Worker != nil {
		t.Errorf("a JoinConfiguration: %+v, %v", doc, err)
	}
	// No file: the defaults of a ClusterConfiguration.
	if doc, err := Load("", env); err != nil || doc.Cluster == nil || doc.Cluster.Node.Name != testHost.Name {
		t.Errorf("no file: %+v, %v", doc, err)
	}
}

// TestLoadNamesTheKindsTaken: a file of a kind the command does not take
// is refused before it is validated, naming the file, its kind, the
// command that takes it and what this one takes.
func TestLoadNamesTheKindsTaken(t *testing.T) {
	path := writeConfig(t, workerHeader+"node: {name: Worker_1}\n")
	_, err := Load(path, Env{Host: testHost, Kinds: []string{KindClusterConfiguration, KindJoinConfiguration}})
	want := "invalid config " + path + ":\n  line 1: a WorkerConfiguration is for `kubeboot join`; this command takes a ClusterConfiguration or JoinConfiguration"
	if err == nil || err.Error() != want || exit.Code(err) != exit.Usage {
		t.Errorf("got %v, want exit 2 and %q", err, want)
	}
}

func duration(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }

// TestLoadWorkerNodeRegistration: node.labels and node.taints are loaded as
// written, and the kubelet's flag and the Node's taints come from them.
func TestLoadWorkerNodeRegistration(t *testing.T) {
	w, err := loadWorkerJoin(writeConfig(t, workerHeader+`node:
  labels: {example.com/pool: gpu, node.kubernetes.io/exclude-from-external-load-balancers: "", topology.kubernetes.io/zone: a, tier: db}
  taints:
  - {key: example.com/dedicated, value: gpu, effect: NoSchedule}
  - {key: example.com/dedicated, value: gpu, effect: NoExecute}
  - {key: spot, effect: PreferNoSchedule}
`), testHost, WorkerFlags{Discovery: Discovery{File: "/d.conf"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := NodeLabelsFlag(w.Node.Labels), "example.com/pool=gpu,node.kubernetes.io/exclude-from-external-load-balancers=,tier=db,topology.kubernetes.io/zone=a"; got != want {
		t.Errorf("NodeLabelsFlag = %q, want %q", got, want)
	}
	want := []corev1.Taint{
		{Key: "example.com/dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule},
		{Key: "example.com/dedicated", Value: "gpu", Effect: corev1.TaintEffectNoExecute},
		{Key: "spot", Effect: corev1.TaintEffectPreferNoSchedule},
	}
	if diff := cmp.Diff(want, CoreTaints(w.Node.Taints)); diff != "" {
		t.Errorf("CoreTaints (-want +got):\n%s", diff)
	}
	if NodeLabelsFlag(nil) != "" || CoreTaints(nil) != nil {
		t.Error("no labels or taints should give no flag and no taints")
	}
}

// TestLoadWorkerRefusesNodeRegistration: every bad label or taint is
// refused at load (exit 2) with its field and its fix.
func TestLoadWorkerRefusesNodeRegistration(t *testing.T) {
	tests := []struct {
		name, node string
		want       []string
	}{
		{"a label the kubelet may not set", "labels: {node-role.kubernetes.io/worker: \"\"}",
			[]string{"node.labels[node-role.kubernetes.io/worker]: Forbidden: the kubelet may set no label under kubernetes.io or k8s.io on its own Node but those under kubelet.kubernetes.io, node.kubernetes.io and ",
				"it refuses --node-labels with it, and the NodeRestriction admission plugin forbids it): use a prefix of your own, such as example.com/role, or set it with `kubectl label node` after the join"}},
		{"a label under k8s.io", "labels: {foo.k8s.io/bar: x}", []string{"node.labels[foo.k8s.io/bar]: Forbidden"}},
		{"NodeRestriction's own prefix", "labels: {node-restriction.kubernetes.io/pool: x}", []string{"node.labels[node-restriction.kubernetes.io/pool]: Forbidden"}},
		{"a bad label key", "labels: {\"-bad\": x}", []string{`node.labels[-bad]: Invalid value: "-bad": not a label key: name part must consist of alphanumeric characters`}},
		{"a bad label value", "labels: {tier: \"a b\"}", []string{`node.labels[tier]: Invalid value: "a b": not a label value: a valid label must be`}},
		{"a taint without a key", "taints: [{effect: NoSchedule}]", []string{"node.taints[0].key: Required value: a taint's key"}},
		{"a bad taint key", "taints: [{key: a/b/c, effect: NoSchedule}]", []string{`node.taints[0].key: Invalid value: "a/b/c": not a taint key`}},
		{"a bad taint value", "taints: [{key: a, value: \"x y\", effect: NoSchedule}]", []string{`node.taints[0].value: Invalid value: "x y": not a taint value`}},
		{"a bad effect", "taints: [{key: a, effect: NoScheduled}]", []string{`node.taints[0].effect: Unsupported value: "NoScheduled": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"`}},
		{"no effect", "taints: [{key: a}]", []string{`node.taints[0].effect: Unsupported value: ""`}},
		{"a taint twice", "taints: [{key: a, value: v1, effect: NoSchedule}, {key: b, effect: NoSchedule}, {key: a, value: v2, effect: NoSchedule}]",
			[]string{`node.taints[2]: Invalid value: "a:NoSchedule": listed twice: a Node has one taint of a key and effect; keep one`}},
		{"an unknown taint field", "taints: [{key: a, effect: NoSchedule, timeAdded: \"2024-01-01T00:00:00Z\"}]", []string{"timeAdded: unknown field"}},
		{"taints twice", "taints: [{key: a, effect: NoSchedule}]}\nkubelet: {extraConfig: {registerWithTaints: [{key: b, effect: NoSchedule}]}",
			[]string{"kubelet.extraConfig.registerWithTaints: Forbidden: node.taints are the kubelet's registerWithTaints: list every taint there and remove this one"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadWorkerJoin(writeConfig(t, workerHeader+"node: {"+tt.node+"}\n"), testHost, WorkerFlags{Discovery: Discovery{File: "/d.conf"}})
			for _, want := range tt.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("got %v, want an error containing %q", err, want)
				}
			}
			if code := exit.Code(err); code != exit.Usage {
				t.Errorf("exit code %d, want %d", code, exit.Usage)
			}
		})
	}
}
