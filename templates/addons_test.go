package templates

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/config"
)

// addonConfig is newConfig's configuration, which must also be valid.
func addonConfig(t *testing.T, edit func(*config.ClusterConfiguration)) *config.ClusterConfiguration {
	t.Helper()
	c := newConfig(edit)
	if errs := config.Validate(c); len(errs) > 0 {
		t.Fatalf("invalid test configuration: %v", errs.ToAggregate())
	}
	return c
}

func dualStack(c *config.ClusterConfiguration) {
	c.Networking.ServiceSubnet = "10.96.0.0/16,fd00:10:96::/112"
	c.Networking.PodSubnet = "10.244.0.0/16,fd00:10:244::/56"
}

func ipv6Only(c *config.ClusterConfiguration) {
	c.Networking.ServiceSubnet = "fd00:10:96::/112"
	c.Networking.PodSubnet = "fd00:10:244::/56"
	c.Node.AdvertiseAddress = "fd00::10"
}

func iptablesMode(c *config.ClusterConfiguration) { c.Addons.KubeProxy.Mode = config.ProxyModeIPTables }

func conntrackExtra(c *config.ClusterConfiguration) {
	c.Addons.KubeProxy.ExtraConfig = map[string]any{"conntrack": map[string]any{"maxPerCore": 0}}
}

// addonCases are the configurations rendered into testdata/addons/.
var addonCases = []struct {
	name string
	edit func(*config.ClusterConfiguration)
}{
	{"default", nil},
	{"dual-stack", dualStack},
	{"iptables", iptablesMode},
	{"extra-config", conntrackExtra},
}

func buildAddons(t *testing.T, c *config.ClusterConfiguration) (dns, proxy Objects) {
	t.Helper()
	dns, err := CoreDNSObjects(c)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err = KubeProxyObjects(c)
	if err != nil {
		t.Fatal(err)
	}
	return dns, proxy
}

// TestAddonsGolden pins every object of the three addons in each
// configuration.
func TestAddonsGolden(t *testing.T) {
	for _, tt := range addonCases {
		t.Run(tt.name, func(t *testing.T) {
			c := addonConfig(t, tt.edit)
			dns, proxy := buildAddons(t, c)
			checkGoldenIn(t, "addons", "coredns-"+tt.name, objectsYAML(t, dns))
			checkGoldenIn(t, "addons", "kube-proxy-"+tt.name, objectsYAML(t, proxy))
			flannel, err := FlannelObjects(c)
			if err != nil {
				t.Fatal(err)
			}
			checkGoldenIn(t, "addons", "flannel-"+tt.name, objectsYAML(t, flannel))
		})
	}
}

// TestFlannelNetwork: flannel's net-conf.json carries each family's pod
// subnet, VXLAN, and nftables unless kube-proxy uses iptables; without a
// pod subnet there are no objects, and the error says what is missing.
func TestFlannelNetwork(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*config.ClusterConfiguration)
		want flannelNetwork
	}{
		{"default", nil, flannelNetwork{Network: "10.244.0.0/16", EnableIPv4: true, EnableNFTables: true, Backend: flannelBackend{Type: "vxlan"}}},
		{"dual-stack", dualStack, flannelNetwork{Network: "10.244.0.0/16", IPv6Network: "fd00:10:244::/56", EnableIPv4: true, EnableIPv6: true, EnableNFTables: true, Backend: flannelBackend{Type: "vxlan"}}},
		{"ipv6", ipv6Only, flannelNetwork{IPv6Network: "fd00:10:244::/56", EnableIPv6: true, EnableNFTables: true, Backend: flannelBackend{Type: "vxlan"}}},
		{"iptables", iptablesMode, flannelNetwork{Network: "10.244.0.0/16", EnableIPv4: true, Backend: flannelBackend{Type: "vxlan"}}},
		{"no kube-proxy", func(c *config.ClusterConfiguration) {
			c.Addons.KubeProxy.Disabled, c.Addons.KubeProxy.Mode = true, config.ProxyModeIPTables
		},
			flannelNetwork{Network: "10.244.0.0/16", EnableIPv4: true, EnableNFTables: true, Backend: flannelBackend{Type: "vxlan"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := FlannelObjects(addonConfig(t, tt.edit))
			if err != nil {
				t.Fatal(err)
			}
			var got flannelNetwork
			if err := json.Unmarshal([]byte(objs.ConfigMaps[0].Data[FlannelNetConfKey]), &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("net-conf.json (-want +got):\n%s", diff)
			}
			mounts := flanneld(t, objs).VolumeMounts
			if lock := slices.ContainsFunc(mounts, func(m corev1.VolumeMount) bool { return m.MountPath == xtablesLockPath }); lock == tt.want.EnableNFTables {
				t.Errorf("xtables lock mounted: %v, with nftables %v", lock, tt.want.EnableNFTables)
			}
		})
	}
	c := newConfig(nil)
	c.Networking.PodSubnet = ""
	if _, err := FlannelObjects(c); err == nil || !strings.Contains(err.Error(), "flannel needs networking.podSubnet") {
		t.Errorf("without a pod subnet: %v", err)
	}

	// flanneld reaches the API server at the control-plane endpoint, not
	// through the kubernetes Service, which needs kube-proxy.
	objs, err := FlannelObjects(addonConfig(t, func(c *config.ClusterConfiguration) { c.ControlPlaneEndpoint = "[fd00::1]:7443" }))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, e := range flanneld(t, objs).Env {
		env[e.Name] = e.Value
	}
	if env["KUBERNETES_SERVICE_HOST"] != "fd00::1" || env["KUBERNETES_SERVICE_PORT"] != "7443" {
		t.Errorf("flanneld's API server: %v, want fd00::1 and 7443", env)
	}
}

// flanneld is the flannel DaemonSet's flanneld container.
func flanneld(t *testing.T, objs Objects) corev1.Container {
	t.Helper()
	pod := objs.DaemonSets[0].Spec.Template.Spec
	i := slices.IndexFunc(pod.InitContainers, func(c corev1.Container) bool { return c.Name == FlannelName })
	if i < 0 {
		t.Fatalf("no container %s among the init containers of DaemonSet %s", FlannelName, objs.DaemonSets[0].Name)
	}
	return pod.InitContainers[i]
}

// TestFlannelInstallsConfigLast: the CNI configuration, which turns the
// node Ready, lands only once flanneld has written the subnet file that
// flannel's plugin reads, so no pod put on the node in between fails its
// sandbox: flanneld is a sidecar whose startup probe is its /readyz
// (ready once the subnet file is written), and the init container that
// installs the plugin and then the configuration follows it.
func TestFlannelInstallsConfigLast(t *testing.T) {
	objs, err := FlannelObjects(addonConfig(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	pod := objs.DaemonSets[0].Spec.Template.Spec
	var names []string
	for _, c := range pod.InitContainers {
		names = append(names, c.Name)
	}
	if want := []string{FlannelName, "install-cni"}; !slices.Equal(names, want) {
		t.Fatalf("init containers %v, want %v", names, want)
	}
	daemon, install := pod.InitContainers[0], pod.InitContainers[1]
	if daemon.RestartPolicy == nil || *daemon.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("flanneld's restartPolicy %v, want Always (a sidecar)", daemon.RestartPolicy)
	}
	if install.RestartPolicy != nil {
		t.Errorf("the installer's restartPolicy %v, want none (it runs once)", *install.RestartPolicy)
	}
	if p := daemon.StartupProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.IntValue() != flannelHealthPort {
		t.Errorf("flanneld's startup probe %+v, want its /readyz on port %d", p, flannelHealthPort)
	}
	if !slices.Contains(daemon.Command, "--kube-subnet-mgr") || !slices.ContainsFunc(daemon.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == flannelRunDir }) {
		t.Errorf("flanneld %v does not write its subnet file into the node's %s: mounts %v", daemon.Command, flannelRunDir, daemon.VolumeMounts)
	}
	if install.Image != config.DefaultFlannelPluginImage || !slices.Equal(install.Command, []string{"sh", "-c", flannelInstallCNI}) {
		t.Errorf("the installer runs %v in %s, want flannelInstallCNI in the plugin's image", install.Command, install.Image)
	}
	if len(pod.Containers) != 1 || pod.Containers[0].Image != config.DefaultKubebootPodImage(config.DefaultImageRepository) {
		t.Errorf("containers %+v, want the pause image alone", pod.Containers)
	}
}

// TestFlannelInstallCNI runs the installer's script with its paths under
// a directory of the test's: the plugin and the configuration land whole,
// over older ones, and nothing else stays behind.
func TestFlannelInstallCNI(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"flannel":                           "the plugin",
		"etc/kube-flannel/cni-conf.json":    FlannelCNIConfig,
		"opt/cni/bin/flannel":               "an older plugin",
		"etc/cni/net.d/10-flannel.conflist": "{}",
	}
	for name, data := range files {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := strings.NewReplacer(" /", " "+root+"/").Replace(flannelInstallCNI)
	if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("%s\n%s: %v", script, out, err)
	}
	for name, want := range map[string]string{cniBinDir + "/flannel": "the plugin", FlannelCNIConfPath: FlannelCNIConfig} {
		if got, err := os.ReadFile(filepath.Join(root, name)); err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
	}
	for _, dir := range []string{cniBinDir, cniConfDir} {
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil || len(entries) != 1 {
			t.Errorf("%s holds %v (%v), want the one file", dir, entries, err)
		}
	}
	if strings.Index(flannelInstallCNI, FlannelCNIConfPath) < strings.Index(flannelInstallCNI, cniBinDir+"/flannel") {
		t.Error("the configuration lands before the plugin")
	}
}

// TestKubeDNSAddress checks that kube-dns sits where every kubelet sends
// its pods' DNS queries: the tenth address of each service range. A
// single family sets clusterIP alone, which the API server completes.
func TestKubeDNSAddress(t *testing.T) {
	type addresses struct {
		ClusterIP  string
		ClusterIPs []string
		Families   []corev1.IPFamily
		Policy     *corev1.IPFamilyPolicy
	}
	dual := ptrTo(corev1.IPFamilyPolicyPreferDualStack)
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	for _, tt := range []struct {
		name string
		edit func(*config.ClusterConfiguration)
		want addresses
	}{
		{"default", nil, addresses{ClusterIP: "10.96.0.10"}},
		{"other range", func(c *config.ClusterConfiguration) { c.Networking.ServiceSubnet = "172.20.0.0/16" }, addresses{ClusterIP: "172.20.0.10"}},
		{"ipv6", ipv6Only, addresses{ClusterIP: "fd00:10:96::a"}},
		{"dual-stack", dualStack, addresses{"10.96.0.10", []string{"10.96.0.10", "fd00:10:96::a"}, []corev1.IPFamily{v4, v6}, dual}},
		{"dual-stack, IPv6 first", func(c *config.ClusterConfiguration) {
			c.Networking.ServiceSubnet = "fd00:10:96::/112,10.96.0.0/16"
			c.Networking.PodSubnet = "fd00:10:244::/56,10.244.0.0/16"
			c.Node.AdvertiseAddress = "fd00::10"
		}, addresses{"fd00:10:96::a", []string{"fd00:10:96::a", "10.96.0.10"}, []corev1.IPFamily{v6, v4}, dual}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := addonConfig(t, tt.edit)
			dns, _ := buildAddons(t, c)
			svc := dns.Services[0]
			if svc.Name != "kube-dns" || svc.Namespace != "kube-system" {
				t.Fatalf("service %s/%s, want kube-system/kube-dns", svc.Namespace, svc.Name)
			}
			got := addresses{svc.Spec.ClusterIP, svc.Spec.ClusterIPs, svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("addresses (-want +got):\n%s", diff)
			}
			// The kubelet configuration's clusterDNS is c.ClusterDNSIP().
			if got.ClusterIP != c.ClusterDNSIP() {
				t.Errorf("clusterIP %s, but the kubelets' clusterDNS is %s", got.ClusterIP, c.ClusterDNSIP())
			}
		})
	}
}

// TestCoreDNSImage checks that CoreDNS follows kubeadm's pin for the
// Kubernetes minor, and the replicas setting.
func TestCoreDNSImage(t *testing.T) {
	for _, tt := range []struct {
		version, image string
		replicas       *int32
		want           int32
	}{
		{"v1.34.4", "registry.k8s.io/coredns/coredns:v1.12.1", nil, config.DefaultCoreDNSReplicas},
		{"v1.35.0", "registry.k8s.io/coredns/coredns:v1.13.1", nil, config.DefaultCoreDNSReplicas},
		{"v1.36.3", "registry.k8s.io/coredns/coredns:v1.14.2", ptrTo(int32(3)), 3},
	} {
		t.Run(tt.version, func(t *testing.T) {
			dns, _ := buildAddons(t, addonConfig(t, func(c *config.ClusterConfiguration) {
				c.KubernetesVersion = tt.version
				c.Addons.CoreDNS.Replicas = tt.replicas
			}))
			d := dns.Deployments[0]
			if got := d.Spec.Template.Spec.Containers[0].Image; got != tt.image {
				t.Errorf("image %s, want %s", got, tt.image)
			}
			if *d.Spec.Replicas != tt.want {
				t.Errorf("replicas %d, want %d", *d.Spec.Replicas, tt.want)
			}
		})
	}
}

// TestCorefile checks the zones CoreDNS serves from the API.
func TestCorefile(t *testing.T) {
	dns, _ := buildAddons(t, addonConfig(t, func(c *config.ClusterConfiguration) { c.Networking.DNSDomain = "lab.example" }))
	corefile := dns.ConfigMaps[0].Data[CoreDNSConfigKey]
	for _, want := range []string{"kubernetes lab.example in-addr.arpa ip6.arpa {", "disable success lab.example\n", "disable denial lab.example\n", "forward . /etc/resolv.conf"} {
		if !strings.Contains(corefile, want) {
			t.Errorf("Corefile lacks %q:\n%s", want, corefile)
		}
	}
	if strings.Count(corefile, "{") != strings.Count(corefile, "}") {
		t.Errorf("Corefile braces do not balance:\n%s", corefile)
	}
}

// proxyConfigFile is the part of a KubeProxyConfiguration the tests read;
// decoding it strictly catches a misspelt or misplaced field.
type proxyConfigFile struct {
	APIVersion       string `json:"apiVersion"`
	Kind             string `json:"kind"`
	BindAddress      string `json:"bindAddress"`
	ClientConnection struct {
		Kubeconfig string `json:"kubeconfig"`
	} `json:"clientConnection"`
	ClusterCIDR string          `json:"clusterCIDR"`
	Mode        string          `json:"mode"`
	Conntrack   *proxyConntrack `json:"conntrack"`
}

type proxyConntrack struct {
	MaxPerCore *int32 `json:"maxPerCore"`
}

// TestKubeProxyConfigMap decodes both keys of the ConfigMap kubeadm join
// and kube-proxy read.
func TestKubeProxyConfigMap(t *testing.T) {
	for _, tt := range []struct {
		name       string
		edit       func(*config.ClusterConfiguration)
		mode, cidr string
		bind       string
		maxPerCore *int32
	}{
		{"default", nil, "nftables", "10.244.0.0/16", "0.0.0.0", nil},
		{"dual-stack", dualStack, "nftables", "10.244.0.0/16,fd00:10:244::/56", "0.0.0.0", nil},
		{"iptables", iptablesMode, "iptables", "10.244.0.0/16", "0.0.0.0", nil},
		{"extra-config", conntrackExtra, "nftables", "10.244.0.0/16", "0.0.0.0", ptrTo(int32(0))},
		{"ipv6", ipv6Only, "nftables", "fd00:10:244::/56", "::", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := addonConfig(t, tt.edit)
			_, proxy := buildAddons(t, c)
			cm := proxy.ConfigMaps[0]
			if cm.Name != "kube-proxy" || cm.Namespace != "kube-system" || len(cm.Data) != 2 {
				t.Fatalf("ConfigMap %s/%s with keys %v, want kube-system/kube-proxy with two", cm.Namespace, cm.Name, slices.Sorted(maps.Keys(cm.Data)))
			}
			var got proxyConfigFile
			if err := yaml.UnmarshalStrict([]byte(cm.Data["config.conf"]), &got); err != nil {
				t.Fatalf("config.conf: %v\n%s", err, cm.Data["config.conf"])
			}
			want := proxyConfigFile{APIVersion: "kubeproxy.config.k8s.io/v1alpha1", Kind: "KubeProxyConfiguration", BindAddress: tt.bind, ClusterCIDR: tt.cidr, Mode: tt.mode}
			want.ClientConnection.Kubeconfig = "/var/lib/kube-proxy/kubeconfig.conf"
			if tt.maxPerCore != nil {
				want.Conntrack = &proxyConntrack{MaxPerCore: tt.maxPerCore}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("config.conf (-want +got):\n%s", diff)
			}

			kc, err := clientcmd.Load([]byte(cm.Data["kubeconfig.conf"]))
			if err != nil {
				t.Fatalf("kubeconfig.conf: %v", err)
			}
			ctx := kc.Contexts[kc.CurrentContext]
			if ctx == nil || kc.Clusters[ctx.Cluster] == nil || kc.AuthInfos[ctx.AuthInfo] == nil {
				t.Fatalf("kubeconfig.conf has no complete current context: %+v", kc)
			}
			const sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
			if cl, u := kc.Clusters[ctx.Cluster], kc.AuthInfos[ctx.AuthInfo]; cl.Server != c.ControlPlaneURL() || cl.CertificateAuthority != sa+"ca.crt" || u.TokenFile != sa+"token" {
				t.Errorf("cluster %+v, user %+v: want server %s, the service account's CA and token", cl, u, c.ControlPlaneURL())
			}
		})
	}
}

// TestKubeProxyHostMounts checks that only iptables mode mounts the
// xtables lock and the kernel modules.
func TestKubeProxyHostMounts(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*config.ClusterConfiguration)
		want map[string]string // volume name: host path and mount path
	}{
		{"nftables", nil, map[string]string{}},
		{"iptables", iptablesMode, map[string]string{"xtables-lock": "/run/xtables.lock", "lib-modules": "/lib/modules"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, proxy := buildAddons(t, addonConfig(t, tt.edit))
			pod := proxy.DaemonSets[0].Spec.Template.Spec
			volumes, mounts := map[string]string{}, map[string]string{}
			for _, v := range pod.Volumes {
				if v.HostPath == nil {
					continue
				}
				volumes[v.Name] = v.HostPath.Path
				if v.Name == "xtables-lock" && (v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathFileOrCreate) {
					t.Errorf("xtables-lock has type %v, want FileOrCreate", v.HostPath.Type)
				}
			}
			for _, m := range pod.Containers[0].VolumeMounts {
				if m.Name != KubeProxyName {
					mounts[m.Name] = m.MountPath
				}
				if m.Name == "lib-modules" && !m.ReadOnly {
					t.Error("lib-modules is mounted read-write")
				}
			}
			if diff := cmp.Diff(tt.want, volumes); diff != "" {
				t.Errorf("host path volumes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, mounts); diff != "" {
				t.Errorf("host path mounts (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAddonReferences checks what the API server does not: that what an
// addon's pods name (a service account, a ConfigMap and its keys, a
// probe's port) is among the addon's objects, and that kube-dns selects
// the CoreDNS pods and targets ports they serve.
func TestAddonReferences(t *testing.T) {
	for _, tt := range addonCases {
		t.Run(tt.name, func(t *testing.T) {
			dns, proxy := buildAddons(t, addonConfig(t, tt.edit))
			checkPodReferences(t, dns, dns.Deployments[0].Spec.Template)
			checkPodReferences(t, proxy, proxy.DaemonSets[0].Spec.Template)
			pod, svc := dns.Deployments[0].Spec.Template, dns.Services[0]
			for k, v := range svc.Spec.Selector {
				if pod.Labels[k] != v {
					t.Errorf("service %s selects %s=%s, which the CoreDNS pods lack", svc.Name, k, v)
				}
			}
			for _, p := range svc.Spec.Ports {
				if !slices.ContainsFunc(pod.Spec.Containers[0].Ports, func(cp corev1.ContainerPort) bool {
					return cp.ContainerPort == p.TargetPort.IntVal && cp.Protocol == p.Protocol
				}) {
					t.Errorf("service %s port %s targets %d/%s, which the pods do not serve", svc.Name, p.Name, p.TargetPort.IntVal, p.Protocol)
				}
			}
		})
	}
}

func checkPodReferences(t *testing.T, objs Objects, tmpl corev1.PodTemplateSpec) {
	t.Helper()
	spec := tmpl.Spec
	if !slices.ContainsFunc(objs.ServiceAccounts, func(sa *corev1.ServiceAccount) bool { return sa.Name == spec.ServiceAccountName }) {
		t.Errorf("pods run as service account %q, which the addon lacks", spec.ServiceAccountName)
	}
	for _, v := range spec.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		i := slices.IndexFunc(objs.ConfigMaps, func(cm *corev1.ConfigMap) bool { return cm.Name == v.ConfigMap.Name })
		if i < 0 {
			t.Errorf("volume %s mounts ConfigMap %q, which the addon lacks", v.Name, v.ConfigMap.Name)
			continue
		}
		for _, item := range v.ConfigMap.Items {
			if _, ok := objs.ConfigMaps[i].Data[item.Key]; !ok {
				t.Errorf("volume %s mounts key %q, which ConfigMap %s lacks", v.Name, item.Key, v.ConfigMap.Name)
			}
		}
	}
	for _, c := range spec.Containers {
		for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
			if p == nil || p.HTTPGet == nil {
				continue
			}
			if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == p.HTTPGet.Port.StrVal }) {
				t.Errorf("container %s probes port %q, which it does not name", c.Name, p.HTTPGet.Port.StrVal)
			}
		}
	}
}

// TestAddonsHoldNoEmptyFields walks each object as applied: a null, an
// empty string or an empty list as a field's value is a field the API
// server drops or defaults, and an empty object is one it may fill in. The only empty
// objects allowed are the typed structs encoding/json cannot leave out:
// a status, which an apply does not set, and a container's resources,
// which the API server stores empty too.
func TestAddonsHoldNoEmptyFields(t *testing.T) {
	for _, tt := range addonCases {
		t.Run(tt.name, func(t *testing.T) {
			dns, proxy := buildAddons(t, addonConfig(t, tt.edit))
			for _, objs := range []Objects{dns, proxy} {
				for _, o := range objs.list() {
					data, err := json.Marshal(o)
					if err != nil {
						t.Fatal(err)
					}
					var doc any
					if err := json.Unmarshal(data, &doc); err != nil {
						t.Fatal(err)
					}
					kind := o.GetObjectKind().GroupVersionKind().Kind
					for _, path := range emptyFields("", doc) {
						t.Errorf("%s carries the empty field %s", kind, path)
					}
				}
			}
		})
	}
}

func emptyFields(path string, v any) []string {
	allowedEmpty := func(path string) bool {
		return path == ".status" || path == ".status.loadBalancer" || strings.HasSuffix(path, "].resources")
	}
	var out []string
	switch v := v.(type) {
	case nil:
		out = append(out, path)
	case string:
		if v == "" {
			out = append(out, path)
		}
	case []any:
		if len(v) == 0 {
			out = append(out, path)
		}
		for i, x := range v {
			// An empty string in a list is a value: "" is the core
			// API group of a rule.
			if x != "" {
				out = append(out, emptyFields(fmt.Sprintf("%s[%d]", path, i), x)...)
			}
		}
	case map[string]any:
		if len(v) == 0 && !allowedEmpty(path) {
			out = append(out, path)
		}
		for k, x := range v {
			out = append(out, emptyFields(path+"."+k, x)...)
		}
	}
	return out
}

// TestNetworkPolicyObjects: the enforcer's DaemonSet runs the node's
// kubeboot (mounted read-only from its path) in the pause image, on the
// host's network, as root with NET_ADMIN alone, at the control-plane
// endpoint; its ServiceAccount may only read pods, namespaces and
// policies.
func TestNetworkPolicyObjects(t *testing.T) {
	kb := Kubeboot{Binary: "/usr/bin/kubeboot", Version: "v1.2.3"}
	objs, err := NetworkPolicyObjects(addonConfig(t, nil), kb)
	if err != nil {
		t.Fatal(err)
	}
	checkGoldenIn(t, "addons", "network-policy-default", objectsYAML(t, objs))
	for _, rule := range objs.ClusterRoles[0].Rules {
		if !slices.Equal(rule.Verbs, []string{"get", "list", "watch"}) {
			t.Errorf("the enforcer may %v %v", rule.Verbs, rule.Resources)
		}
	}
	pod := objs.DaemonSets[0].Spec.Template.Spec
	c := pod.Containers[0]
	if c.Image != "registry.k8s.io/pause:"+config.PauseVersion || !slices.Equal(c.Command, []string{"/usr/bin/kubeboot", "network-policy", "--node-name=$(NODE_NAME)"}) ||
		!pod.HostNetwork || *c.SecurityContext.RunAsUser != 0 || !slices.Equal(c.SecurityContext.Capabilities.Add, []corev1.Capability{"NET_ADMIN"}) ||
		c.VolumeMounts[0].MountPath != kb.Binary || !c.VolumeMounts[0].ReadOnly || pod.Volumes[0].HostPath.Path != kb.Binary {
		t.Errorf("the enforcer's pod: %+v", pod)
	}
	if got := objs.DaemonSets[0].Spec.Template.Annotations[AnnotationKubebootVersion]; got != "v1.2.3" {
		t.Errorf("the pod's kubeboot release %q, want v1.2.3: a new release must roll the DaemonSet", got)
	}
}
