package templates

import (
	"bytes"
	stdflag "flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/config"
)

var update = stdflag.Bool("update", false, "rewrite the golden files under testdata")

// newConfig returns a defaulted configuration for node1 at 10.0.0.10, after
// letting edit set what the test case needs.
func newConfig(edit func(*config.ClusterConfiguration)) *config.ClusterConfiguration {
	cfg := config.New()
	if edit != nil {
		edit(cfg)
	}
	config.SetDefaults(cfg, config.Host{Name: "node1", Address: "10.0.0.10"})
	return cfg
}

// testKubeboot is the node's kubeboot binary in the tests.
var testKubeboot = Kubeboot{Binary: "/usr/bin/kubeboot", Version: "v0.5.0"}

// overrides exercises extraArgs (an override, a removed flag, a repeated
// flag, a new flag), extraVolumes and extraEnv on every component.
func overrides(cfg *config.ClusterConfiguration) {
	cfg.Etcd.Local = &config.LocalEtcd{ExtraArgs: []config.Arg{
		{Name: "listen-metrics-urls", Value: "http://127.0.0.1:2382"},
		{Name: "quota-backend-bytes", Value: "8589934592"},
		{Name: "snapshot-count", Remove: true},
	}}
	cfg.APIServer.Component = config.Component{
		ExtraArgs: []config.Arg{
			{Name: "service-account-issuer", Value: "https://issuer.example.com"},
			{Name: "enable-bootstrap-token-auth", Remove: true},
			{Name: "audit-log-path", Value: "/var/log/kubernetes/audit.log"},
			{Name: "enable-admission-plugins", Value: "NodeRestriction,AlwaysPullImages"},
			{Name: "service-account-issuer", Value: "https://kubernetes.default.svc.cluster.local"},
		},
		ExtraVolumes: []config.HostPathMount{{
			Name: "audit-log", HostPath: "/var/log/kubernetes", MountPath: "/var/log/kubernetes",
			PathType: corev1.HostPathDirectoryOrCreate,
		}},
		ExtraEnv: []config.EnvVar{{Name: "GOMAXPROCS", Value: "2"}},
	}
	cfg.ControllerManager = config.Component{
		ExtraArgs: []config.Arg{
			{Name: "bind-address", Value: "0.0.0.0"},
			{Name: "secure-port", Value: "10357"},
			{Name: "use-service-account-credentials", Remove: true},
		},
		ExtraVolumes: []config.HostPathMount{{
			Name: "cloud-config", HostPath: "/etc/kubernetes/cloud.conf", MountPath: "/etc/cloud/cloud.conf",
			ReadOnly: true, PathType: corev1.HostPathFile,
		}},
		ExtraEnv: []config.EnvVar{{Name: "TZ", Value: "UTC"}, {Name: "GOMAXPROCS", Value: "2"}},
	}
	cfg.Scheduler = config.Component{
		ExtraArgs: []config.Arg{
			{Name: "v", Value: "2"},
			{Name: "config", Value: "/etc/kubernetes/scheduler-config.yaml"},
			{Name: "leader-elect", Value: "false"},
		},
		ExtraVolumes: []config.HostPathMount{{
			Name: "scheduler-config", HostPath: "/etc/kubernetes/scheduler-config.yaml",
			MountPath: "/etc/kubernetes/scheduler-config.yaml", ReadOnly: true,
		}},
	}
}

// testPatches returns one patch file of patchType for every static pod.
func testPatches(patchType string) []Patch {
	var patches []Patch
	for _, c := range config.StaticPodNames {
		var p Patch
		switch patchType {
		case PatchStrategic:
			p = Patch{File: "patches/" + c + "+strategic.yaml", Data: []byte(`
metadata:
  annotations:
    example.com/patched: strategic
spec:
  containers:
  - name: ` + c + `
    resources:
      requests:
        cpu: 500m
`)}
		case PatchMerge:
			p = Patch{File: "patches/" + c + "+merge.json", Data: []byte(
				`{"metadata": {"labels": {"example.com/patched": "merge"}}, "spec": {"terminationGracePeriodSeconds": 60}}`)}
		case PatchJSON:
			p = Patch{File: "patches/" + c + "+json.yaml", Data: []byte(`
- op: add
  path: /spec/containers/0/env
  value: [{name: GODEBUG, value: "madvdontneed=1"}]
- op: replace
  path: /spec/containers/0/imagePullPolicy
  value: Always
`)}
		}
		patches = append(patches, p)
	}
	return patches
}

// goldenCases are the configurations rendered into testdata/<name>/.
var goldenCases = []struct {
	name    string
	edit    func(*config.ClusterConfiguration)
	patches []Patch
}{
	{name: "default"},
	{name: "v1.34", edit: func(c *config.ClusterConfiguration) { c.KubernetesVersion = "v1.34.4" }},
	{name: "v1.35", edit: func(c *config.ClusterConfiguration) { c.KubernetesVersion = "v1.35.4" }},
	{name: "v1.36", edit: func(c *config.ClusterConfiguration) { c.KubernetesVersion = "v1.36.1" }},
	{name: "dual-stack", edit: func(c *config.ClusterConfiguration) {
		c.Networking.ServiceSubnet = "10.96.0.0/12, fd00:10:96::/112"
		c.Networking.PodSubnet = "10.244.0.0/16,fd00:10:244::/56"
	}},
	{name: "ipv6", edit: func(c *config.ClusterConfiguration) {
		c.Node.AdvertiseAddress = "fd00::10"
		c.Networking.ServiceSubnet = "fd00:10:96::/112"
	}},
	{name: "loopback", edit: func(c *config.ClusterConfiguration) {
		c.Node.Name = "loop"
		c.Node.AdvertiseAddress = "127.0.0.2"
		c.APIServer.BindPort = 6444
	}},
	{name: "external-etcd", edit: func(c *config.ClusterConfiguration) {
		c.Etcd.External = &config.ExternalEtcd{
			Endpoints: []string{"https://10.0.0.21:2379", "https://10.0.0.22:2379"},
			CAFile:    "/etc/etcd/pki/ca.crt",
			CertFile:  "/etc/etcd/pki/clients/apiserver.crt",
			KeyFile:   "/srv/etcd-keys/apiserver.key",
		}
	}},
	{name: "overrides", edit: overrides},
	{name: "security-off", edit: securityOff},
	{name: "security-custom", edit: securityCustom},
	{name: "patch-strategic", patches: testPatches(PatchStrategic)},
	{name: "patch-merge", patches: testPatches(PatchMerge)},
	{name: "patch-json", patches: testPatches(PatchJSON)},
}

// render builds, patches and marshals every pod of a golden case, by file
// name.
func render(t testing.TB, edit func(*config.ClusterConfiguration), patches []Patch) map[string][]byte {
	t.Helper()
	manifests, err := All(newConfig(edit), EtcdMembership{}, testKubeboot)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, m := range manifests {
		pod, err := ApplyPatches(m.Component, m.Pod, patches)
		if err != nil {
			t.Fatal(err)
		}
		data, err := Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		files[m.Component+".yaml"] = data
	}
	return files
}

func TestGolden(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join("testdata", tc.name)
			got := render(t, tc.edit, tc.patches)
			if *update {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				for name, data := range got {
					if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatalf("%v (run go test ./templates -update)", err)
			}
			if len(entries) != len(got) {
				t.Errorf("%s holds %d files, want %d", dir, len(entries), len(got))
			}
			for name, data := range got {
				want, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatalf("%v (run go test ./templates -update)", err)
				}
				if diff := cmp.Diff(string(want), string(data)); diff != "" {
					t.Errorf("%s/%s mismatch (-golden +got):\n%s", dir, name, diff)
				}
			}
		})
	}
}

// TestMarshalRoundTrip checks that a manifest decodes strictly back into the
// pod it came from and carries none of the empty-object noise.
func TestMarshalRoundTrip(t *testing.T) {
	manifests, err := All(newConfig(overrides), EtcdMembership{}, testKubeboot)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range manifests {
		data, err := Marshal(m.Pod)
		if err != nil {
			t.Fatal(err)
		}
		for _, noise := range []string{"creationTimestamp", "status:"} {
			if bytes.Contains(data, []byte(noise)) {
				t.Errorf("%s: manifest contains %q", m.Component, noise)
			}
		}
		var pod corev1.Pod
		if err := yaml.UnmarshalStrict(data, &pod); err != nil {
			t.Fatalf("%s: %v", m.Component, err)
		}
		if diff := cmp.Diff(m.Pod, &pod); diff != "" {
			t.Errorf("%s: round trip mismatch (-built +decoded):\n%s", m.Component, diff)
		}
	}
}

func TestDeterministic(t *testing.T) {
	first := render(t, overrides, testPatches(PatchStrategic))
	if diff := cmp.Diff(first, render(t, overrides, testPatches(PatchStrategic))); diff != "" {
		t.Fatalf("second render differs:\n%s", diff)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		shuffled := render(t, func(cfg *config.ClusterConfiguration) {
			overrides(cfg)
			shuffleArgs(rng, cfg.Etcd.Local.ExtraArgs)
			shuffleArgs(rng, cfg.APIServer.ExtraArgs)
			shuffleArgs(rng, cfg.ControllerManager.ExtraArgs)
			shuffleArgs(rng, cfg.Scheduler.ExtraArgs)
		}, testPatches(PatchStrategic))
		if diff := cmp.Diff(first, shuffled); diff != "" {
			t.Fatalf("shuffled extraArgs change the output:\n%s", diff)
		}
	}
}

// shuffleArgs shuffles args in place but keeps same-named args in their
// relative order, which is meaningful for a repeated flag.
func shuffleArgs(rng *rand.Rand, args []config.Arg) {
	byName := map[string][]config.Arg{}
	for _, a := range args {
		byName[a.Name] = append(byName[a.Name], a)
	}
	rng.Shuffle(len(args), func(i, j int) { args[i], args[j] = args[j], args[i] })
	for i, a := range args {
		args[i], byName[a.Name] = byName[a.Name][0], byName[a.Name][1:]
	}
}

// TestVersionsDifferOnlyInImages pins down that v1.34 to v1.36 share their
// flags, volumes and probes; see DIFFERENCES.md.
func TestVersionsDifferOnlyInImages(t *testing.T) {
	want := render(t, func(c *config.ClusterConfiguration) { c.KubernetesVersion = "v1.36.1" }, nil)
	for _, v := range []string{"v1.34.0", "v1.35.4"} {
		got := render(t, func(c *config.ClusterConfiguration) { c.KubernetesVersion = v }, nil)
		for name, data := range got {
			data = bytes.ReplaceAll(data, []byte(":"+v), []byte(":v1.36.1"))
			if diff := cmp.Diff(string(want[name]), string(data)); diff != "" {
				t.Errorf("%s %s differs from v1.36.1 beyond the image (-v1.36.1 +%s):\n%s", v, name, v, diff)
			}
		}
	}
}

// TestPodShape checks what every control-plane pod must have, whatever the
// configuration.
func TestPodShape(t *testing.T) {
	binaries := map[string]string{
		config.NameEtcd: "etcd", config.NameAPIServer: "kube-apiserver",
		config.NameControllerManager: "kube-controller-manager", config.NameScheduler: "kube-scheduler",
		config.NameCSRApprover: testKubeboot.Binary,
	}
	for _, tc := range goldenCases {
		manifests, err := All(newConfig(tc.edit), EtcdMembership{}, testKubeboot)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range manifests {
			pod, c := m.Pod, m.Pod.Spec.Containers[0]
			where := tc.name + "/" + m.Component
			if pod.Name != m.Component || pod.Namespace != "kube-system" || !pod.Spec.HostNetwork ||
				pod.Spec.PriorityClassName != "system-node-critical" ||
				pod.Spec.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s: wrong pod metadata or spec: %+v", where, pod.ObjectMeta)
			}
			if diff := cmp.Diff(map[string]string{"component": m.Component, "tier": "control-plane"}, pod.Labels); diff != "" {
				t.Errorf("%s: labels (-want +got):\n%s", where, diff)
			}
			if c.Command[0] != binaries[m.Component] {
				t.Errorf("%s: command starts with %q", where, c.Command[0])
			}
			flags := slices.DeleteFunc(slices.Clone(c.Command[1:]), func(a string) bool { return a == CSRApproverCommand })
			if !slices.IsSortedFunc(flags, func(a, b string) int {
				return strings.Compare(strings.SplitN(a, "=", 2)[0], strings.SplitN(b, "=", 2)[0])
			}) {
				t.Errorf("%s: flags are not sorted by name: %q", where, flags)
			}
			for _, v := range pod.Spec.Volumes {
				if v.HostPath == nil {
					t.Errorf("%s: volume %q is not a hostPath", where, v.Name)
				}
			}
			for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.StrVal != c.Ports[0].Name {
					t.Errorf("%s: missing probe or probe on another port: %+v", where, p)
				}
			}
			if c.Resources.Requests.Cpu().IsZero() {
				t.Errorf("%s: no cpu request", where)
			}
		}
	}
}

func TestBuildErrors(t *testing.T) {
	builders := map[string]func(*config.ClusterConfiguration) (*corev1.Pod, error){
		config.NameEtcd:              func(c *config.ClusterConfiguration) (*corev1.Pod, error) { return Etcd(c, EtcdMembership{}) },
		config.NameAPIServer:         APIServer,
		config.NameControllerManager: ControllerManager, config.NameScheduler: Scheduler,
		config.NameCSRApprover: func(c *config.ClusterConfiguration) (*corev1.Pod, error) { return CSRApprover(c, testKubeboot) },
	}
	tests := []struct {
		name string
		edit func(*config.ClusterConfiguration)
		want string
	}{
		{"too old", func(c *config.ClusterConfiguration) { c.KubernetesVersion = "v1.33.5" }, "supports v1.34 to v1.36"},
		{"too new", func(c *config.ClusterConfiguration) { c.KubernetesVersion = "v1.37.0" }, "supports v1.34 to v1.36"},
		{"not a version", func(c *config.ClusterConfiguration) { c.KubernetesVersion = "latest" }, `parse kubernetes version "latest"`},
		{"bad address", func(c *config.ClusterConfiguration) { c.Node.AdvertiseAddress = "node1.example.com" }, "not an IP address"},
	}
	for _, tc := range tests {
		for name, build := range builders {
			_, err := build(newConfig(tc.edit))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), name) {
				t.Errorf("%s: %s: got error %v, want one about %s containing %q", tc.name, name, err, name, tc.want)
			}
		}
	}
	external := newConfig(func(c *config.ClusterConfiguration) {
		c.Etcd.External = &config.ExternalEtcd{Endpoints: []string{"https://10.0.0.21:2379"}}
	})
	if _, err := Etcd(external, EtcdMembership{}); err == nil {
		t.Error("Etcd with an external etcd: got no error")
	}
	if manifests, err := All(external, EtcdMembership{}, testKubeboot); err != nil || len(manifests) != 4 || manifests[0].Component != config.NameAPIServer {
		t.Errorf("All with an external etcd: got %d manifests and error %v, want 4, from kube-apiserver, and none", len(manifests), err)
	}
}

func BenchmarkRender(b *testing.B) {
	cfg := newConfig(nil)
	builders := []struct {
		name  string
		build func(*config.ClusterConfiguration) (*corev1.Pod, error)
	}{
		{config.NameEtcd, func(c *config.ClusterConfiguration) (*corev1.Pod, error) { return Etcd(c, EtcdMembership{}) }},
		{config.NameAPIServer, APIServer},
		{config.NameControllerManager, ControllerManager}, {config.NameScheduler, Scheduler},
	}
	for _, bb := range builders {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				pod, err := bb.build(cfg)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := Marshal(pod); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestEtcdMembership: a member that joined an existing cluster renders the
// cluster it joined and --initial-cluster-state=existing, over the
// configuration's flags of those names (even a removal): a joined member
// never founds a new cluster.
func TestEtcdMembership(t *testing.T) {
	joined := EtcdMembership{InitialCluster: "node0=https://10.0.0.9:2380,node1=https://10.0.0.10:2380"}
	tests := []struct {
		name string
		m    EtcdMembership
		edit func(*config.ClusterConfiguration)
		want []string
	}{
		{"founding member", EtcdMembership{}, nil, []string{"--initial-cluster=node1=https://10.0.0.10:2380"}},
		{"joined member", joined, nil, []string{"--initial-cluster=" + joined.InitialCluster, "--initial-cluster-state=existing"}},
		{"the configuration's flags", joined, func(c *config.ClusterConfiguration) {
			c.Etcd.Local = &config.LocalEtcd{ExtraArgs: []config.Arg{{Name: "initial-cluster-state", Value: "new"}, {Name: "initial-cluster", Remove: true}}}
		}, []string{"--initial-cluster=" + joined.InitialCluster, "--initial-cluster-state=existing"}},
	}
	for _, tc := range tests {
		pod, err := Etcd(newConfig(tc.edit), tc.m)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got []string
		for _, arg := range pod.Spec.Containers[0].Command {
			if strings.HasPrefix(arg, "--initial-cluster") {
				got = append(got, arg)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: got flags %q, want %q", tc.name, got, tc.want)
		}
	}
}
