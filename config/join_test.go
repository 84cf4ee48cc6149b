package config

import (
	"strings"
	"testing"
)

const joinHeader = "apiVersion: kubeboot.io/v1alpha1\nkind: JoinConfiguration\n"

func TestLoadJoin(t *testing.T) {
	host := Host{Name: "node2", Address: "10.0.0.12"}
	j, err := LoadJoin(writeConfig(t, joinHeader+"controlPlaneEndpoint: 10.0.0.10:6443\njoin:\n  etcdEndpoints: [https://10.0.0.11:2379]\n"), host)
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
		{"no etcd endpoints", joinHeader + "controlPlaneEndpoint: 10.0.0.10\n", "join.etcdEndpoints: Required value"},
		{"plain http etcd", joinHeader + "controlPlaneEndpoint: 10.0.0.10\njoin: {etcdEndpoints: [http://10.0.0.11:2379]}\n", "line 4: join.etcdEndpoints[0]: Invalid value: \"http://10.0.0.11:2379\": want an https:// client URL"},
		{"unknown field", joinHeader + "controlPlaneEndpoint: 10.0.0.10\njoin: {etcdEndpoint: [https://a:2379]}\n", "join.etcdEndpoint: unknown field"},
		{"a ClusterConfiguration", "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\n", "a ClusterConfiguration is for `kubeboot init`"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadJoin(writeConfig(t, tt.text), host)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	// init refuses a JoinConfiguration, naming the command that takes it.
	_, err = Load(writeConfig(t, joinHeader), host)
	if err == nil || !strings.Contains(err.Error(), "a JoinConfiguration is for `kubeboot join --control-plane`") {
		t.Errorf("Load of a JoinConfiguration: %v", err)
	}
}

func TestLoadAny(t *testing.T) {
	host := Host{Name: "node2", Address: "10.0.0.12"}
	c, err := LoadAny(writeConfig(t, joinHeader+"controlPlaneEndpoint: 10.0.0.10\njoin: {etcdEndpoints: [https://10.0.0.11:2379]}\n"), host)
	if err != nil || c.ControlPlaneEndpoint != "10.0.0.10" {
		t.Fatalf("LoadAny(JoinConfiguration) = %+v, %v", c, err)
	}
	if _, err := LoadAny(writeConfig(t, header), host); err != nil {
		t.Fatalf("LoadAny(ClusterConfiguration): %v", err)
	}
	// A broken JoinConfiguration reports its own problem, not its kind.
	_, err = LoadAny(writeConfig(t, joinHeader+"controlPlaneEndpoint: 10.0.0.10\n"), host)
	if err == nil || !strings.Contains(err.Error(), "join.etcdEndpoints: Required value") {
		t.Fatalf("LoadAny(invalid JoinConfiguration): %v", err)
	}
}
