package lab_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/lab"
)

// TestKnobErrors: each mistake in the feature gates, runtime config,
// patch, port mappings and extra mounts is named with its file, field
// and fix.
func TestKnobErrors(t *testing.T) {
	cp := "nodes: [{name: a, role: control-plane}]\n"
	for _, tc := range []struct{ name, text, want string }{
		{"gate", "featureGates: {in-place: true}\n" + cp, `featureGates: "in-place": want a feature gate's name`},
		{"gate value", "featureGates: {InPlacePodVerticalScaling: \"on\"}\n" + cp, "featureGates"},
		{"runtime key", "runtimeConfig: {alpha: \"true\"}\n" + cp, `runtimeConfig: "alpha": want api/all, api/alpha`},
		{"runtime value", "runtimeConfig: {api/alpha: \"on\"}\n" + cp, `runtimeConfig.api/alpha: "on": want "true" or "false"`},
		{"patch kind", "clusterConfigurationPatch: {kind: JoinConfiguration}\n" + cp, "clusterConfigurationPatch.kind: the lab sets it"},
		{"patch of kubeadm's", "clusterConfigurationPatch: {apiServer: {certSANs: [x]}}\nnodes: [{name: a, role: control-plane, init: kubeadm}]\n", "clusterConfigurationPatch: it patches kubeboot's configuration, and kubeadm inits this lab"},
		{"image", "images: [\"Kube Router:v2\"]\n" + cp, `images[0]: "Kube Router:v2": want an image reference with its tag`},
		{"empty image", "images: [\"\"]\n" + cp, `images[0]: "": want an image reference`},
		{"host port", "portMappings: [{hostPort: 70000, nodePort: 30080}]\n" + cp, "portMappings[0].hostPort: 70000: want a port of this host's loopback"},
		{"host port twice", "portMappings: [{hostPort: 8080, nodePort: 30080}, {hostPort: 8080, nodePort: 30081}]\n" + cp, "portMappings[1].hostPort: 8080 is mapped twice"},
		{"node port", "portMappings: [{hostPort: 8080, nodePort: 80}]\n" + cp, "portMappings[0].nodePort: 80: want a NodePort, 30000 to 32767"},
		{"relative host path", "nodes: [{name: a, role: control-plane, extraMounts: [{hostPath: data, containerPath: /data}]}]\n", `nodes[0].extraMounts[0].hostPath: "data": want a clean absolute path`},
		{"colon", "nodes: [{name: a, role: control-plane, extraMounts: [{hostPath: /srv, containerPath: \"/a:b\"}]}]\n", `nodes[0].extraMounts[0].containerPath: "/a:b": want a clean absolute path without ':'`},
		{"over /usr", "nodes: [{name: a, role: control-plane, extraMounts: [{hostPath: /srv, containerPath: /usr/local}]}]\n", `nodes[0].extraMounts[0].containerPath: "/usr/local": /usr is the node's own`},
		{"over root", "nodes: [{name: a, role: control-plane, extraMounts: [{hostPath: /srv, containerPath: /}]}]\n", `nodes[0].extraMounts[0].containerPath: "/": / is the node's own`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeDescription(t, header+tc.text)
			_, err := lab.LoadCluster(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("got %v, want an error naming %s and %q", err, path, tc.want)
			}
		})
	}
}

// knobs is a lab with every knob set.
const knobs = `featureGates: {InPlacePodVerticalScaling: true, AllAlpha: false}
runtimeConfig: {api/alpha: "false", storage.k8s.io/v1alpha1: "true"}
clusterConfigurationPatch:
  apiServer:
    certSANs: [lab.example]
  kubelet:
    extraConfig:
      maxPods: 50
portMappings: [{hostPort: 8080, nodePort: 30080}]
nodes:
- {name: cp1, role: control-plane}
- {name: cp2, role: control-plane}
- {name: w1, role: worker, extraMounts: [{hostPath: /srv/a, containerPath: /data}, {hostPath: /srv/b, containerPath: /etc/b, readOnly: true}]}
`

// TestNodeFilesCarryTheKnobs: the feature gates reach every component
// (the control plane's flags, every kubelet's and kube-proxy's
// configuration), the runtime config the API server alone, the patch
// every control-plane node's file and no worker's, merged over the
// lab's own settings.
func TestNodeFilesCarryTheKnobs(t *testing.T) {
	c, err := lab.LoadCluster(writeDescription(t, header+knobs))
	if err != nil {
		t.Fatal(err)
	}
	files, _, _, err := lab.Lab{Cluster: c}.NodeFiles()
	if err != nil {
		t.Fatal(err)
	}
	gates := map[string]any{"InPlacePodVerticalScaling": true, "AllAlpha": false}
	gateArg := map[string]any{"name": "feature-gates", "value": "AllAlpha=false,InPlacePodVerticalScaling=true"}
	runtimeArg := map[string]any{"name": "runtime-config", "value": "api/alpha=false,storage.k8s.io/v1alpha1=true"}
	for i, f := range files {
		var doc map[string]any
		if err := yaml.Unmarshal([]byte(f), &doc); err != nil {
			t.Fatal(err)
		}
		at := func(path ...string) any {
			var v any = doc
			for _, p := range path {
				m, _ := v.(map[string]any)
				v = m[p]
			}
			return v
		}
		if diff := cmp.Diff(gates, at("kubelet", "extraConfig", "featureGates")); diff != "" {
			t.Errorf("node %d: the kubelet's feature gates (-want +got):\n%s", i, diff)
		}
		if i == 2 {
			if doc["apiServer"] != nil || doc["controllerManager"] != nil {
				t.Errorf("the worker's file has the control plane's settings: %s", f)
			}
			continue
		}
		if diff := cmp.Diff([]any{gateArg, runtimeArg}, at("apiServer", "extraArgs")); diff != "" {
			t.Errorf("node %d: the API server's flags (-want +got):\n%s", i, diff)
		}
		for _, component := range []string{"controllerManager", "scheduler"} {
			if diff := cmp.Diff([]any{gateArg}, at(component, "extraArgs")); diff != "" {
				t.Errorf("node %d: %s's flags (-want +got):\n%s", i, component, diff)
			}
		}
		if diff := cmp.Diff(gates, at("addons", "kubeProxy", "extraConfig", "featureGates")); diff != "" {
			t.Errorf("node %d: kube-proxy's feature gates (-want +got):\n%s", i, diff)
		}
		if sans := at("apiServer", "certSANs"); !cmp.Equal(sans, []any{"lab.example"}) {
			t.Errorf("node %d: the patch's certSANs: %v", i, sans)
		}
		// Merged: the patch's field beside the lab's own.
		if at("kubelet", "extraConfig", "maxPods") != float64(50) || at("kubelet", "extraConfig", "failSwapOn") != false {
			t.Errorf("node %d: the kubelet's extraConfig after the patch: %v", i, at("kubelet", "extraConfig"))
		}
		if kind := []string{"ClusterConfiguration", "JoinConfiguration"}[i]; doc["kind"] != kind {
			t.Errorf("node %d is a %v, want a %s", i, doc["kind"], kind)
		}
	}
}

// TestKubeadmInitCarriesTheKnobs: a lab that kubeadm inits gets the
// feature gates and runtime config in kubeadm's configuration.
func TestKubeadmInitCarriesTheKnobs(t *testing.T) {
	c, err := lab.LoadCluster(writeDescription(t, header+`featureGates: {InPlacePodVerticalScaling: true}
runtimeConfig: {api/alpha: "false"}
nodes: [{name: cp1, role: control-plane, init: kubeadm}]
`))
	if err != nil {
		t.Fatal(err)
	}
	_, kubeadm, _, err := lab.Lab{Cluster: c}.NodeFiles()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"apiServer:\n  extraArgs:\n  - name: feature-gates\n    value: InPlacePodVerticalScaling=true\n  - name: runtime-config\n    value: api/alpha=false\n",
		"scheduler:\n  extraArgs:\n  - name: feature-gates\n    value: InPlacePodVerticalScaling=true\n",
		"kind: KubeletConfiguration\n",
		"featureGates:\n  InPlacePodVerticalScaling: true\n",
	} {
		if !strings.Contains(kubeadm[0], want) {
			t.Errorf("kubeadm's configuration lacks %q:\n%s", want, kubeadm[0])
		}
	}
	if n := strings.Count(kubeadm[0], "featureGates:\n  InPlacePodVerticalScaling: true\n"); n != 2 {
		t.Errorf("the kubelet's and kube-proxy's feature gates: %d of 2", n)
	}
}

// TestUpRefusesBadKnobs: a patch or a feature gate that makes a
// control-plane node's configuration invalid, an extra mount of a host
// path that does not exist and a port mapping whose host port is taken
// are refused by Up as InputErrors naming the field, before anything is
// set up.
func TestUpRefusesBadKnobs(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = taken.Close() }()
	port := taken.Addr().(*net.TCPAddr).Port
	dir := filepath.Join(t.TempDir(), "lab")
	for _, tc := range []struct{ name, text, want string }{
		{"unknown field", "clusterConfigurationPatch: {apiServr: {certSANs: [x]}}\nnodes: [{name: cp1, role: control-plane}, {name: cp2, role: control-plane}]\n",
			"node cp1's configuration would be refused: apiServr: unknown field"},
		{"invalid value", "clusterConfigurationPatch: {networking: {serviceSubnet: nonsense}}\nnodes: [{name: cp1, role: control-plane}]\n",
			"node cp1's configuration would be refused: networking.serviceSubnet"},
		{"missing host path", "nodes: [{name: cp1, role: control-plane, extraMounts: [{hostPath: /nonexistent/kb, containerPath: /data}]}]\n",
			"nodes[0].extraMounts[0].hostPath: stat /nonexistent/kb: no such file or directory: create it, or mount another path"},
		{"taken port", "portMappings: [{hostPort: " + strconv.Itoa(port) + ", nodePort: 30080}]\nnodes: [{name: cp1, role: control-plane}]\n",
			"portMappings[0].hostPort: listen tcp 127.0.0.1:" + strconv.Itoa(port) + ": bind: address already in use: choose a free port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			desc := writeDescription(t, strings.Replace(header, "/tmp/kb-lab", dir, 1)+tc.text)
			c, err := lab.LoadCluster(desc)
			if err != nil {
				t.Fatal(err)
			}
			registry := filepath.Join(t.TempDir(), "labs")
			_, err = lab.Lab{Cluster: c, Package: fakePackage(t), Registry: registry}.Up(t.Context(), make(chan lab.Event, 100))
			var refused *lab.InputError
			if !errors.As(err, &refused) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), desc) {
				t.Errorf("%v, want an InputError naming %s and %q", err, desc, tc.want)
			}
			for _, made := range []string{dir, registry} {
				if _, err := os.Stat(made); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the refused lab made %s", made)
				}
			}
		})
	}
}

// TestMachineOfANodeWithMounts: a node's extra mounts are its machine's
// binds, read-only or shared, each from the host path to the container
// path.
func TestMachineOfANodeWithMounts(t *testing.T) {
	c, err := lab.LoadCluster(writeDescription(t, header+knobs))
	if err != nil {
		t.Fatal(err)
	}
	m := c.Machine(2, "/tmp/kb-lab", "/tmp/kb-lab/usr", "/tmp/kb-lab/kubeboot.deb")
	if !slices.Contains(m.Binds, "/srv/b:/etc/b") || slices.Contains(m.Binds, "/srv/a:/data") {
		t.Errorf("read-only binds %v, want /srv/b:/etc/b and not /srv/a", m.Binds)
	}
	if !slices.Equal(m.Shared, []string{"/srv/a:/data"}) {
		t.Errorf("shared %v, want /srv/a:/data", m.Shared)
	}
	if first := c.Machine(0, "/tmp/kb-lab", "/tmp/kb-lab/usr", "/tmp/kb-lab/kubeboot.deb"); len(first.Shared) != 0 || !slices.Equal(first.Binds, []string{"/tmp/kb-lab/kubeboot.deb:/opt/kubeboot/kubeboot.deb"}) {
		t.Errorf("a node without extra mounts: binds %v, shared %v", first.Binds, first.Shared)
	}
}
