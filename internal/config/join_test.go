package config

import (
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/exit"
)

const joinHeader = "apiVersion: kubeboot.io/v1alpha1\nkind: JoinConfiguration\n"

func TestLoadJoin(t *testing.T) {
	host := Host{Name: "node2", Address: "10.0.0.12"}
	j, err := loadJoinFile(writeConfig(t, joinHeader+"controlPlaneEndpoint: 10.0.0.10:6443\njoin:\n  etcdEndpoints: [https://10.0.0.11:2379]\n"), host)
	if err != nil {
		t.Fatal(err)
	}
	if j.Node.Name != "node2" || j.Join.EtcdEndpoints[0] != "https://10.0.0.11:2379" || j.Kind != KindJoinConfiguration || j.Etcd.Local == nil {
		t.Errorf("loaded %+v", j)
	}

	tests := []struct {
		name, text, want string
	}{
		{"no endpoint", joinHeader + "join: {etcdEndpoints: [https://10.0.0.11:2379]}\n", "controlPlaneEndpoint: Required value"},
		{"plain http etcd", joinHeader + "controlPlaneEndpoint: 10.0.0.10\njoin: {etcdEndpoints: [http://10.0.0.11:2379]}\n", "line 4: join.etcdEndpoints[0]: Invalid value: \"http://10.0.0.11:2379\": want an https:// client URL"},
		{"unknown field", joinHeader + "controlPlaneEndpoint: 10.0.0.10\njoin: {etcdEndpoint: [https://a:2379]}\n", "join.etcdEndpoint: unknown field"},
		{"a ClusterConfiguration", "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\n", "a ClusterConfiguration is for `kubeboot init`"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadJoinFile(writeConfig(t, tt.text), host)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	// init refuses a JoinConfiguration, naming the command that takes it.
	_, err = loadInit(writeConfig(t, joinHeader), host)
	if err == nil || !strings.Contains(err.Error(), "a JoinConfiguration is for `kubeboot join --control-plane`") {
		t.Errorf("Load of a JoinConfiguration: %v", err)
	}
}

func TestLoadAny(t *testing.T) {
	host := Host{Name: "node2", Address: "10.0.0.12"}
	c, err := loadNode(writeConfig(t, joinHeader+"controlPlaneEndpoint: 10.0.0.10\njoin: {etcdEndpoints: [https://10.0.0.11:2379]}\n"), host)
	if err != nil || c.ControlPlaneEndpoint != "10.0.0.10" {
		t.Fatalf("loadNode(JoinConfiguration) = %+v, %v", c, err)
	}
	if _, err := loadNode(writeConfig(t, header), host); err != nil {
		t.Fatalf("loadNode(ClusterConfiguration): %v", err)
	}
	// Without join.etcdEndpoints, the join reads them from the cluster.
	if j, err := loadNode(writeConfig(t, joinHeader+"controlPlaneEndpoint: 10.0.0.10\n"), host); err != nil || j.ControlPlaneEndpoint != "10.0.0.10" {
		t.Fatalf("loadNode(JoinConfiguration without etcdEndpoints) = %+v, %v", j, err)
	}
	// A broken JoinConfiguration reports its own problem, not its kind.
	_, err = loadNode(writeConfig(t, joinHeader+"join: {etcdEndpoints: [https://10.0.0.11:2379]}\n"), host)
	if err == nil || !strings.Contains(err.Error(), "controlPlaneEndpoint: Required value") {
		t.Fatalf("loadNode(invalid JoinConfiguration): %v", err)
	}
}

// TestLoadJoinNodeRegistration: a joining control-plane node takes
// node.labels and node.taints as a worker does, and refuses the
// control-plane taint that node.controlPlaneTaint takes off.
func TestLoadJoinNodeRegistration(t *testing.T) {
	const base = joinHeader + "controlPlaneEndpoint: 10.0.0.10:6443\njoin: {etcdEndpoints: [https://10.0.0.11:2379]}\n"
	j, err := loadJoinFile(writeConfig(t, base+"node:\n  labels: {example.com/zone: a}\n  taints: [{key: node-role.kubernetes.io/control-plane, effect: NoSchedule}, {key: example.com/etcd, effect: NoExecute}]\n"), testHost)
	if err != nil {
		t.Fatal(err)
	}
	if j.Node.Labels["example.com/zone"] != "a" || len(j.Node.Taints) != 2 || j.Node.Taints[1] != (NodeTaint{Key: "example.com/etcd", Effect: "NoExecute"}) {
		t.Errorf("loaded node %+v", j.Node)
	}
	tests := []struct{ name, node, want string }{
		{"a label the kubelet may not set", "labels: {node-role.kubernetes.io/etcd: \"\"}", "node.labels[node-role.kubernetes.io/etcd]: Forbidden: the kubelet may set no label under kubernetes.io or k8s.io"},
		{"a bad effect", "taints: [{key: a, effect: noschedule}]", `node.taints[0].effect: Unsupported value: "noschedule"`},
		{"a taint twice", "taints: [{key: a, effect: NoExecute}, {key: a, value: b, effect: NoExecute}]", `node.taints[1]: Invalid value: "a:NoExecute": listed twice`},
		{"the control-plane taint turned off", "controlPlaneTaint: false, taints: [{key: node-role.kubernetes.io/control-plane, effect: NoSchedule}]",
			"node.taints[0]: Forbidden: node.controlPlaneTaint is false, which takes this taint off: remove it here, or leave node.controlPlaneTaint on"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadJoinFile(writeConfig(t, base+"node: {"+tt.node+"}\n"), testHost)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
			if exit.Code(err) != exit.Usage {
				t.Errorf("exit code %d, want %d", exit.Code(err), exit.Usage)
			}
		})
	}
	// init's node takes them too, checked alike.
	if _, err := loadInit(writeConfig(t, header+"node: {taints: [{key: a, effect: Sometimes}]}\n"), testHost); err == nil || !strings.Contains(err.Error(), "node.taints[0].effect: Unsupported value") {
		t.Errorf("init with a bad taint: %v", err)
	}
}

// TestLoadJoinDiscoveryFlags: join --control-plane's discovery flags win
// over join.discovery, which they make when the file has none, and are
// validated with the file: a bad one is a config error naming the field.
func TestLoadJoinDiscoveryFlags(t *testing.T) {
	host := Host{Name: "node2", Address: "10.0.0.12"}
	hash := "sha256:" + strings.Repeat("ab", 32)
	base := joinHeader + "controlPlaneEndpoint: 10.0.0.10:6443\njoin:\n  etcdEndpoints: [https://10.0.0.11:2379]\n"
	load := func(text string, flags Discovery) (*JoinConfiguration, error) {
		doc, err := Load(writeConfig(t, text), Env{Host: host, Kinds: []string{KindJoinConfiguration}, JoinDiscovery: &flags})
		return doc.Join, err
	}
	j, err := load(base, Discovery{APIServerEndpoint: "10.0.0.10:6443", Token: "abcdef.0123456789abcdef", CACertHashes: []string{hash}})
	if err != nil || j.Join.Discovery == nil || j.Join.Discovery.Token != "abcdef.0123456789abcdef" || j.Join.Discovery.CACertHashes[0] != hash {
		t.Fatalf("flags over no join.discovery: %+v, %v", j, err)
	}
	j, err = load(base+"  discovery: {apiServerEndpoint: 10.0.0.10:6443, token: abcdef.0123456789abcdef, caCertHashes: ["+hash+"]}\n", Discovery{Token: "zyxwvu.0123456789abcdef"})
	if err != nil || j.Join.Discovery.Token != "zyxwvu.0123456789abcdef" || j.Join.Discovery.APIServerEndpoint != "10.0.0.10:6443" {
		t.Fatalf("a flag over join.discovery: %+v, %v", j.Join.Discovery, err)
	}
	if j, err = load(base, Discovery{}); err != nil || j.Join.Discovery != nil {
		t.Fatalf("no flags: %+v, %v", j, err)
	}
	_, err = load(base, Discovery{Token: "not-a-token"})
	if exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), "join.discovery.token") {
		t.Fatalf("a bad --token: %v", err)
	}
}

// TestCertificateKeys: init's certificateKey and a join's
// join.certificateKey (the file's, or --certificate-key over it) are 64
// hex digits, never echoed when malformed; a join's needs the discovery
// token that reads the Secret. An error names where the key came from:
// --certificate-key when given, else join.certificateKey.
func TestCertificateKeys(t *testing.T) {
	host := Host{Name: "node2", Address: "10.0.0.12"}
	key, other := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	hash := "sha256:" + strings.Repeat("ab", 32)
	discovery := "  discovery: {apiServerEndpoint: 10.0.0.10:6443, token: abcdef.0123456789abcdef, caCertHashes: [" + hash + "]}\n"
	base := joinHeader + "controlPlaneEndpoint: 10.0.0.10:6443\njoin:\n"
	load := func(text, flag string) (*JoinConfiguration, error) {
		doc, err := Load(writeConfig(t, text), Env{Host: host, Kinds: []string{KindJoinConfiguration}, JoinDiscovery: &Discovery{}, JoinCertificateKey: flag})
		return doc.Join, err
	}
	if j, err := load(base+discovery+"  certificateKey: "+key+"\n", ""); err != nil || j.Join.CertificateKey != key {
		t.Fatalf("join.certificateKey: %+v, %v", j, err)
	}
	if j, err := load(base+discovery+"  certificateKey: "+key+"\n", other); err != nil || j.Join.CertificateKey != other {
		t.Fatalf("--certificate-key over join.certificateKey: %+v, %v", j, err)
	}
	for _, tc := range []struct{ text, flag, want string }{
		{base + discovery + "  certificateKey: NOTHEX" + key[6:] + "\n", "", "join.certificateKey: Invalid value: \"(hidden)\": want 64 lowercase hex digits"},
		{base + discovery, "abc123", "--certificate-key: Invalid value: \"(hidden)\": want 64 lowercase hex digits"},
		{base + discovery + "  certificateKey: " + key + "\n", "abc123", "--certificate-key: Invalid value: \"(hidden)\""},
		{base + "  etcdEndpoints: [https://10.0.0.11:2379]\n", key, "join.discovery.token: Required value: --certificate-key fetches the kubeadm-certs Secret with the bootstrap token"},
		{base + "  etcdEndpoints: [https://10.0.0.11:2379]\n  certificateKey: " + key + "\n", "", "join.discovery.token: Required value: join.certificateKey fetches the kubeadm-certs Secret"},
	} {
		_, err := load(tc.text, tc.flag)
		if exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "abc123") || strings.Contains(err.Error(), "NOTHEX") ||
			(tc.flag != "" && strings.Contains(err.Error(), "join.certificateKey")) {
			t.Errorf("load with flag %q:\n%v\nwant exit 2 and %q, the key never echoed, the flag named when given", tc.flag, err, tc.want)
		}
	}
	_, err := Load(writeConfig(t, "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\ncertificateKey: "+key[:60]+"\n"), Env{Host: host})
	if exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), "certificateKey: Invalid value: \"(hidden)\"") || strings.Contains(err.Error(), key[:60]) {
		t.Errorf("a short certificateKey: %v", err)
	}
}
