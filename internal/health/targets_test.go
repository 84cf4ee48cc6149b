package health

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/templates"
)

func testConfig(address string) *config.ClusterConfiguration {
	cfg := config.New()
	config.SetDefaults(cfg, config.Host{Name: "node1", Address: address})
	return cfg
}

// rendered renders the manifests as kubeboot writes them.
func rendered(t *testing.T, cfg *config.ClusterConfiguration) map[string]*corev1.Pod {
	t.Helper()
	manifests, err := templates.All(cfg, templates.EtcdMembership{}, templates.Kubeboot{Binary: "/usr/bin/kubeboot", Version: "v0.0.0-test"})
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]*corev1.Pod{}
	for _, m := range manifests {
		pods[m.Component] = m.Pod
	}
	return pods
}

const pkiDir = "/etc/kubernetes/pki/"

// defaultTargets are the targets of the default configuration on a node
// with the given advertise address and loopback address.
func defaultTargets(advertise, loopback string) []Target {
	return []Target{
		{Component: config.NameEtcd, Endpoints: []string{"https://" + loopback + ":2379"},
			CAFile: pkiDir + "etcd/ca.crt", CertFile: pkiDir + "etcd/healthcheck-client.crt", KeyFile: pkiDir + "etcd/healthcheck-client.key",
			ServerCertFile: pkiDir + "etcd/server.crt"},
		{Component: config.NameAPIServer, Endpoints: []string{"https://" + advertise + ":6443"}, Paths: []string{"/livez", "/readyz"},
			CAFile: pkiDir + "ca.crt", CertFile: pkiDir + "apiserver-kubelet-client.crt", KeyFile: pkiDir + "apiserver-kubelet-client.key",
			ServerCertFile: pkiDir + "apiserver.crt"},
		{Component: config.NameControllerManager, Endpoints: []string{"https://" + loopback + ":10257"}, Paths: []string{"/healthz"},
			CAFile: pkiDir + "ca.crt", ServerCertFile: pkiDir + "controller-manager.crt"},
		{Component: config.NameScheduler, Endpoints: []string{"https://" + loopback + ":10259"}, Paths: []string{"/livez"},
			CAFile: pkiDir + "ca.crt", ServerCertFile: pkiDir + "scheduler.crt"},
	}
}

// TestTargetsFromRenderedManifests reads the targets back from the pods the
// templates render, so extra args move them.
func TestTargetsFromRenderedManifests(t *testing.T) {
	tests := []struct {
		name string
		edit func(cfg *config.ClusterConfiguration)
		want func(want []Target)
	}{
		{name: "defaults", want: func([]Target) {}},
		{name: "extra args move ports and addresses", edit: func(cfg *config.ClusterConfiguration) {
			cfg.APIServer.ExtraArgs = []config.Arg{{Name: "secure-port", Value: "7443"}, {Name: "bind-address", Value: "0.0.0.0"}}
			cfg.ControllerManager.ExtraArgs = []config.Arg{{Name: "secure-port", Value: "10357"}, {Name: "bind-address", Value: "0.0.0.0"}}
			cfg.Scheduler.ExtraArgs = []config.Arg{{Name: "bind-address", Value: "10.0.0.10"}}
			cfg.Etcd.Local.ExtraArgs = []config.Arg{{Name: "listen-client-urls", Value: "https://0.0.0.0:3379"}}
		}, want: func(w []Target) {
			w[0].Endpoints = []string{"https://127.0.0.1:3379"}
			w[1].Endpoints = []string{"https://10.0.0.10:7443"}
			w[2].Endpoints = []string{"https://127.0.0.1:10357"}
			w[3].Endpoints = []string{"https://10.0.0.10:10259"}
		}},
		{name: "bind port from the configuration", edit: func(cfg *config.ClusterConfiguration) {
			cfg.APIServer.BindPort = 16443
		}, want: func(w []Target) { w[1].Endpoints = []string{"https://10.0.0.10:16443"} }},
		{name: "external etcd", edit: func(cfg *config.ClusterConfiguration) {
			cfg.Etcd.Local = nil
			cfg.Etcd.External = &config.ExternalEtcd{Endpoints: []string{"https://10.0.0.2:2379", "https://10.0.0.3:2379"},
				CAFile: "/e/ca.crt", CertFile: "/e/c.crt", KeyFile: "/e/c.key"}
		}, want: func(w []Target) {
			w[0] = Target{Component: config.NameEtcd, Endpoints: []string{"https://10.0.0.2:2379", "https://10.0.0.3:2379"},
				CAFile: "/e/ca.crt", CertFile: "/e/c.crt", KeyFile: "/e/c.key", External: true}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig("10.0.0.10")
			if tt.edit != nil {
				tt.edit(cfg)
			}
			got, err := Targets(cfg, rendered(t, cfg))
			if err != nil {
				t.Fatal(err)
			}
			want := defaultTargets("10.0.0.10", "127.0.0.1")
			tt.want(want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestTargetsLoopbackAndIPv6: lab nodes on 127.0.0.x and IPv6 nodes keep
// every component on their own loopback address.
func TestTargetsLoopbackAndIPv6(t *testing.T) {
	for _, tt := range []struct{ advertise, loopback, hostport string }{
		{"127.0.0.2", "127.0.0.1", "127.0.0.2"},
		{"fd00::10", "[::1]", "[fd00::10]"},
	} {
		t.Run(tt.advertise, func(t *testing.T) {
			cfg := testConfig(tt.advertise)
			got, err := Targets(cfg, rendered(t, cfg))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(defaultTargets(tt.hostport, tt.loopback), got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func pod(container string, command ...string) *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: container, Command: command}}}}
}

// TestTargetsFromHandWrittenPods covers what the templates never render:
// absent flags, "--flag value" pairs, repeated flags, sidecars.
func TestTargetsFromHandWrittenPods(t *testing.T) {
	cfg := testConfig("10.0.0.10")
	bare := map[string]*corev1.Pod{
		config.NameEtcd:              pod("etcd", "etcd"),
		config.NameAPIServer:         pod("kube-apiserver", "kube-apiserver"),
		config.NameControllerManager: pod("kube-controller-manager", "kube-controller-manager"),
		config.NameScheduler:         pod("kube-scheduler", "kube-scheduler"),
	}
	got, err := Targets(cfg, bare)
	if err != nil {
		t.Fatal(err)
	}
	want := defaultTargets("10.0.0.10", "127.0.0.1")
	// etcd without flags serves plain HTTP on localhost, and the
	// components name no serving certificate.
	want[0] = Target{Component: config.NameEtcd, Endpoints: []string{"http://localhost:2379"}}
	for i := range want {
		want[i].ServerCertFile = ""
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("without flags (-want +got):\n%s", diff)
	}

	sidecar := pod("log-shipper", "ship", "--secure-port=1")
	sidecar.Spec.Containers = append(sidecar.Spec.Containers, corev1.Container{
		Name:    config.NameAPIServer,
		Command: []string{"kube-apiserver", "--secure-port", "7443", "--advertise-address=10.0.0.11"},
		Args:    []string{"--secure-port=8443", "--profiling"},
	})
	pods := map[string]*corev1.Pod{
		config.NameEtcd:              pod("etcd", "etcd", "--listen-client-urls", "https://10.0.0.10:2379,http://127.0.0.1:2379,https://[::1]:2379"),
		config.NameAPIServer:         sidecar,
		config.NameControllerManager: pod("kube-controller-manager", "kube-controller-manager", "--bind-address=::"),
		config.NameScheduler:         pod("kube-scheduler", "kube-scheduler", "--bind-address", "0.0.0.0", "--secure-port", "20259"),
	}
	got, err = Targets(cfg, pods)
	if err != nil {
		t.Fatal(err)
	}
	var endpoints []string
	for _, target := range got {
		endpoints = append(endpoints, target.Endpoints...)
	}
	wantEndpoints := []string{"https://[::1]:2379", "https://10.0.0.11:8443", "https://[::1]:10257", "https://127.0.0.1:20259"}
	if diff := cmp.Diff(wantEndpoints, endpoints); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
}

func TestTargetsErrors(t *testing.T) {
	cfg := testConfig("10.0.0.10")
	pods := rendered(t, cfg)
	delete(pods, config.NameScheduler)
	if _, err := Targets(cfg, pods); err == nil || !strings.Contains(err.Error(), `"kube-scheduler": no manifest given`) {
		t.Errorf("missing pod: got %v", err)
	}
	pods[config.NameScheduler] = pod("kube-scheduler", "kube-scheduler", "--secure-port=http")
	if _, err := Targets(cfg, pods); err == nil || !strings.Contains(err.Error(), `parse --secure-port "http": not a port number`) {
		t.Errorf("bad port: got %v", err)
	}
}

// TestProbesUnderRoot builds the probes of a node whose files live under a
// root prefix, and names the host path of a missing file.
func TestProbesUnderRoot(t *testing.T) {
	root := t.TempDir()
	cfg := testConfig("10.0.0.10")
	pki := filepath.Join(root, cfg.Certificates.Dir)
	for _, ca := range []string{config.CertCA, config.CertEtcdCA} {
		c := newCA(t, filepath.Dir(filepath.Join(pki, ca)), filepath.Base(ca))
		client := config.CertAPIServerKubeletClient
		if ca == config.CertEtcdCA {
			client = config.CertEtcdHealthcheckClient
		}
		c.issue(t, filepath.Dir(filepath.Join(pki, client)), filepath.Base(client))
	}
	hostPath := func(p string) string { return filepath.Join(root, p) }
	probes, err := Probes(cfg, rendered(t, cfg), hostPath)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range probes {
		got = append(got, p.Component+" "+p.Target)
	}
	want := []string{
		"etcd https://127.0.0.1:2379",
		"kube-apiserver https://10.0.0.10:6443/livez, /readyz",
		"kube-controller-manager https://127.0.0.1:10257/healthz",
		"kube-scheduler https://127.0.0.1:10259/livez",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	missing := filepath.Join(pki, "etcd", "healthcheck-client.key")
	if err := os.Remove(missing); err != nil {
		t.Fatal(err)
	}
	if _, err := Probes(cfg, rendered(t, cfg), hostPath); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("want an error naming %s, got %v", missing, err)
	}
}
