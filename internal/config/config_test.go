package config

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ and docs/reference/config.md")

var testHost = Host{Name: "node1", Address: "10.0.0.10"}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeboot.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const header = "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\n"

// loadInit loads path as init does: a ClusterConfiguration, or no file for
// the defaults.
func loadInit(path string, host Host) (*ClusterConfiguration, error) {
	doc, err := Load(path, Env{Host: host, Kinds: []string{KindClusterConfiguration}})
	return doc.Cluster, err
}

// loadJoinFile loads path as join --control-plane does.
func loadJoinFile(path string, host Host) (*JoinConfiguration, error) {
	doc, err := Load(path, Env{Host: host, Kinds: []string{KindJoinConfiguration}})
	return doc.Join, err
}

// loadNode loads path as the commands on any control-plane node do.
func loadNode(path string, host Host) (*ClusterConfiguration, error) {
	doc, err := Load(path, Env{Host: host, Kinds: []string{KindClusterConfiguration, KindJoinConfiguration}})
	return doc.ControlPlane(), err
}

// loadWorkerJoin loads path as a worker's join with flags does.
func loadWorkerJoin(path string, host Host, flags WorkerFlags) (*WorkerConfiguration, error) {
	doc, err := Load(path, Env{Host: host, Kinds: []string{KindWorkerConfiguration}, Worker: &flags})
	return doc.Worker, err
}

func TestDefaultsGolden(t *testing.T) {
	c, err := loadInit("", testHost)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "defaults.yaml")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("defaults differ from %s (-want +got); rerun with -update if intended:\n%s", golden, diff)
	}
	// The printed defaults must load back to the same configuration.
	back, err := loadInit(writeConfig(t, string(got)), Host{Name: "other", Address: "192.168.1.1"})
	if err != nil {
		t.Fatalf("print-defaults output does not load: %v", err)
	}
	if diff := cmp.Diff(c, back); diff != "" {
		t.Errorf("round trip changed the config (-want +got):\n%s", diff)
	}
}

func TestDefaultsKeepUserValues(t *testing.T) {
	c, err := loadInit(writeConfig(t, header+`
kubernetesVersion: "1.35.2"
node: {name: cp1, advertiseAddress: 192.168.0.5}
networking: {serviceSubnet: 10.100.0.0/16}
etcd: {external: {endpoints: ["https://10.0.0.2:2379"], caFile: /e/ca.crt, certFile: /e/c.crt, keyFile: /e/c.key}}
certificates: {keyAlgorithm: rsa-2048}
`), testHost)
	if err != nil {
		t.Fatal(err)
	}
	if c.KubernetesVersion != "v1.35.2" || c.Node.Name != "cp1" || c.Node.AdvertiseAddress != "192.168.0.5" ||
		c.Networking.ServiceSubnet != "10.100.0.0/16" || c.Certificates.KeyAlgorithm != RSA2048 {
		t.Errorf("user values were overridden: %+v", c)
	}
	if c.Etcd.Local != nil {
		t.Errorf("external etcd must not get a local etcd default, got %+v", c.Etcd.Local)
	}
}

func TestStrictLoading(t *testing.T) {
	tests := []struct {
		name, body string
		want       []string // substrings of the error
	}{
		{"unknown field", header + "networking:\n  serviceSubnett: 10.96.0.0/12\n", []string{"line 4: networking.serviceSubnett: unknown field"}},
		{"unknown top-level field", header + "clustername: x\n", []string{"line 3: clustername: unknown field"}},
		{"unknown field in list", header + "apiServer:\n  extraArgs:\n  - name: a\n    vlaue: b\n", []string{"line 6: apiServer.extraArgs[0].vlaue: unknown field"}},
		{"duplicate key", header + "clusterName: a\nclusterName: b\n", []string{"line 4: clusterName: duplicate key (first set on line 3)"}},
		{"nested duplicate key", header + "node:\n  name: a\n  name: b\n", []string{"line 5: node.name: duplicate key"}},
		{"duplicate bind port", header + "apiServer:\n  bindPort: 6443\n  bindPort: 7443\n", []string{"line 5: apiServer.bindPort: duplicate key (first set on line 4)"}},
		{"duplicate key in a list", header + "apiServer:\n  extraArgs:\n  - name: a\n    name: b\n", []string{"line 6: apiServer.extraArgs[0].name: duplicate key"}},
		{"wrong type", header + "apiServer:\n  bindPort: high\n", []string{"line 4: apiServer.bindPort: wrong type: got string, want int32"}},
		{"yaml 1.1 boolean", header + "clusterName: no\n", []string{"clusterName: wrong type: got bool", "quote the value"}},
		{"duration past its range", header + "timeouts:\n  controlPlane: 9999999999h\n", []string{`line 4: timeouts.controlPlane: time: invalid duration "9999999999h": want a duration like 90s, 4m or 24h, of at most 2562047h`}},
		{"duration in a list", header + "bootstrapTokens:\n- token: abcdef.0123456789abcdef\n  ttl: 1e30h\n", []string{`line 5: bootstrapTokens[0].ttl: time: unknown unit "e" in duration "1e30h": want a duration`}},
		{"foreign kind", header + "clusterName: a\n---\napiVersion: v1\nkind: ConfigMap\n", []string{"document 2: unsupported document apiVersion \"v1\" kind \"ConfigMap\""}},
		{"two cluster configurations", header + "---\n" + header, []string{"document 2: more than one ClusterConfiguration"}},
		{"wrong apiVersion", "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n", []string{"want apiVersion kubeboot.io/v1alpha1"}},
		{"empty file", "", []string{"the file is empty"}},
		{"syntax error", header + "node: [\n", []string{"line "}},
		{"not a mapping", "- a\n", []string{"expected a mapping"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.body)
			_, err := loadInit(path, testHost)
			var inv *InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("want *InvalidError, got %v", err)
			}
			if inv.ExitCode() != 2 {
				t.Errorf("exit code %d, want 2", inv.ExitCode())
			}
			msg := err.Error()
			if !strings.Contains(msg, path) {
				t.Errorf("error does not name the file %s:\n%s", path, msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := loadInit(filepath.Join(t.TempDir(), "nope.yaml"), testHost)
	var inv *InvalidError
	if !errors.As(err, &inv) || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("want an InvalidError naming the file, got %v", err)
	}
}
