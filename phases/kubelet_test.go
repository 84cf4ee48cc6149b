package phases

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/config"
)

func TestKubeletConfiguration(t *testing.T) {
	c := config.New()
	c.Networking.ServiceSubnet = "fd00:10:96::/112,10.96.0.0/16"
	c.Kubelet.ExtraConfig = map[string]any{"failSwapOn": false, "authentication": map[string]any{"anonymous": map[string]any{"enabled": true}}, "healthzPort": nil}
	config.SetDefaults(c, config.Host{Name: "node1", Address: "fd00::10"})
	data, err := KubeletConfiguration(c)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
		"staticPodPath":            "/etc/kubernetes/manifests",
		"containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
		"authentication": map[string]any{
			"x509":      map[string]any{"clientCAFile": "/etc/kubernetes/pki/ca.crt"},
			"webhook":   map[string]any{"enabled": true},
			"anonymous": map[string]any{"enabled": true}, // overridden by extraConfig
		},
		"authorization":      map[string]any{"mode": "Webhook"},
		"clusterDNS":         []any{"fd00:10:96::a"},
		"clusterDomain":      "cluster.local",
		"healthzBindAddress": "127.0.0.1",
		"readOnlyPort":       float64(0),
		"rotateCertificates": true,
		"failSwapOn":         false, // added by extraConfig; healthzPort removed by its null
		// The serving certificate the API server verifies, and the TLS limits.
		"tlsCertFile":       "/etc/kubernetes/pki/kubelet-server.crt",
		"tlsPrivateKeyFile": "/etc/kubernetes/pki/kubelet-server.key",
		"tlsMinVersion":     "VersionTLS12",
		"tlsCipherSuites": []any{
			"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
			"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("KubeletConfiguration (-want +got):\n%s", diff)
	}
}

// TestKubeletConfigurationWithoutHardening checks that the kubelet signs
// its own serving certificate and keeps Go's TLS defaults when the
// switches are off.
func TestKubeletConfigurationWithoutHardening(t *testing.T) {
	c := config.New()
	off := false
	c.Security.VerifyKubeletServingCerts, c.Security.TLS.Enabled = &off, &off
	config.SetDefaults(c, config.Host{Name: "node1", Address: "10.0.0.10"})
	data, err := KubeletConfiguration(c)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"tlsCertFile", "tlsPrivateKeyFile", "tlsMinVersion", "tlsCipherSuites"} {
		if v, ok := got[key]; ok {
			t.Errorf("%s = %v with the switches off", key, v)
		}
	}
}

// TestClusterKubeletConfiguration checks the configuration joining nodes
// get: the node's, without what only this node has, as the lab's config
// sets it.
func TestClusterKubeletConfiguration(t *testing.T) {
	c := config.New()
	c.Paths.ManifestsDir = "/tmp/kubeboot-lab/manifests"
	c.Certificates.Dir = "/tmp/kubeboot-lab/pki"
	c.Kubelet.ContainerRuntimeEndpoint = "unix:///tmp/kubeboot-lab/cri.sock"
	c.Kubelet.ExtraConfig = map[string]any{
		"failSwapOn": false, "maxPods": 50,
		"address": "127.0.0.7", "healthzBindAddress": "127.0.0.7",
		"volumePluginDir": "/tmp/kubeboot-lab/kubelet/volume-plugins", "podLogsDir": "/tmp/kubeboot-lab/pod-logs",
	}
	c.Node.Taints = []config.NodeTaint{{Key: "example.com/dedicated", Value: "etcd", Effect: corev1.TaintEffectNoExecute}}
	config.SetDefaults(c, config.Host{Name: "node1", Address: "127.0.0.7"})
	node, err := KubeletConfiguration(c)
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := ClusterKubeletConfiguration(c)
	if err != nil {
		t.Fatal(err)
	}
	var n, got map[string]any
	if err := yaml.Unmarshal(node, &n); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(cluster, &got); err != nil {
		t.Fatal(err)
	}
	// What differs from this node's file, and nothing else.
	want := map[string]any{}
	for k, v := range n {
		want[k] = v
	}
	// node.taints register this node's Node, and no other.
	if diff := cmp.Diff([]any{map[string]any{"key": "example.com/dedicated", "value": "etcd", "effect": "NoExecute"}}, n["registerWithTaints"]); diff != "" {
		t.Errorf("this node's registerWithTaints (-want +got):\n%s", diff)
	}
	for _, k := range []string{"containerRuntimeEndpoint", "tlsCertFile", "tlsPrivateKeyFile", "address", "volumePluginDir", "podLogsDir", "registerWithTaints"} {
		delete(want, k)
	}
	want["staticPodPath"] = "/etc/kubernetes/manifests"
	want["healthzBindAddress"] = "127.0.0.1"
	// kubeadm join writes the CA there; the serving certificate is asked
	// of the cluster CA, as security.verifyKubeletServingCerts needs.
	want["authentication"].(map[string]any)["x509"] = map[string]any{"clientCAFile": "/etc/kubernetes/pki/ca.crt"}
	want["serverTLSBootstrap"] = true
	if _, ok := n["serverTLSBootstrap"]; ok {
		t.Errorf("this node's kubelet, which has its serving certificate from kubeboot, bootstraps one: %s", node)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cluster-wide KubeletConfiguration (-want +got):\n%s", diff)
	}
	if got["maxPods"] != float64(50) || got["failSwapOn"] != false {
		t.Errorf("the cluster's extraConfig is lost: %v", got)
	}
	if again, _ := ClusterKubeletConfiguration(c); string(again) != string(cluster) {
		t.Error("the cluster-wide KubeletConfiguration is not deterministic")
	}
	if c.Kubelet.ExtraConfig["address"] != "127.0.0.7" {
		t.Error("ClusterKubeletConfiguration changed the node's extraConfig")
	}
}
