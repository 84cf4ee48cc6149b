package lab_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/internal/lab"
)

// registeredLab writes a registry entry as a lab that is up has it.
func registeredLab(t *testing.T, registry string, e lab.Entry) {
	t.Helper()
	if err := os.MkdirAll(registry, 0o755); err != nil {
		t.Fatal(err)
	}
	ports, err := json.Marshal(e.HostPorts)
	if err != nil {
		t.Fatal(err)
	}
	data := `{"name":"` + e.Name + `","description":"/labs/` + e.Name + `.yaml","dir":"` + e.Dir + `","subnet":"` + e.Subnet +
		`","podSubnet":"` + e.PodSubnet + `","nodes":["cp1"],"endpoint":"127.0.0.1:40001","hostPorts":` + string(ports) + `,"started":"2026-11-27T10:00:00Z"}`
	if err := os.WriteFile(filepath.Join(registry, e.Name+".json"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLabUpRefusesACollision: a lab whose name, dir, subnet or pod subnet
// a lab that is up already has is refused before anything is set up,
// naming the field, the other lab and the fix, as an InputError (exit 2),
// by Up and by Boot alike; nothing is written to the registry.
func TestLabUpRefusesACollision(t *testing.T) {
	registry := filepath.Join(t.TempDir(), "labs")
	registeredLab(t, registry, lab.Entry{Name: "other", Dir: "/tmp/kb-other", Subnet: "10.89.5.0/24,fd89:5::/64", PodSubnet: "10.250.0.0/16,fd10:250::/56", HostPorts: []int{8080, 8443}})
	for _, tc := range []struct{ name, text, want string }{
		{"name", "name: other\ndir: /tmp/kb-x\nsubnet: 10.89.6.0/24\npodSubnet: 10.251.0.0/16\n", `name: "other" collides with lab other, which is up`},
		{"dir", "name: x\ndir: /tmp/kb-other/\nsubnet: 10.89.6.0/24\npodSubnet: 10.251.0.0/16\n", `dir: "/tmp/kb-other/" collides with lab other`},
		{"subnet", "name: x\ndir: /tmp/kb-x\nsubnet: 10.89.5.0/24\npodSubnet: 10.251.0.0/16\n", `subnet: "10.89.5.0/24" collides with lab other, which is up (/labs/other.yaml, subnet 10.89.5.0/24,fd89:5::/64)`},
		// A dual-stack lab's IPv6 networks collide as its IPv4 ones do.
		{"IPv6 subnet", "name: x\ndir: /tmp/kb-x\nsubnet: '10.89.6.0/24,fd89:5::/64'\npodSubnet: '10.251.0.0/16,fd10:251::/56'\nserviceSubnet: '10.96.0.0/12,fd10:96::/112'\n",
			`subnet: "10.89.6.0/24,fd89:5::/64" collides with lab other`},
		{"IPv6 pod subnet", "name: x\ndir: /tmp/kb-x\nsubnet: '10.89.6.0/24,fd89:6::/64'\npodSubnet: '10.251.0.0/16,fd10:250:0:80::/57'\nserviceSubnet: '10.96.0.0/12,fd10:96::/112'\n",
			`podSubnet: "10.251.0.0/16,fd10:250:0:80::/57" collides with lab other`},
		{"pod subnet", "name: x\ndir: /tmp/kb-x\nsubnet: 10.89.6.0/24\npodSubnet: 10.250.0.0/15\n", `podSubnet: "10.250.0.0/15" collides with lab other`},
		{"host port", "name: x\ndir: /tmp/kb-x\nsubnet: 10.89.6.0/24\npodSubnet: 10.251.0.0/16\nportMappings: [{hostPort: 9000, nodePort: 30000}, {hostPort: 8443, nodePort: 30001}]\n",
			"portMappings[1].hostPort: 8443 collides with lab other, which is up (/labs/other.yaml) and maps it: choose another hostPort"},
	} {
		desc := writeDescription(t, "apiVersion: kubeboot.io/v1alpha1\nkind: LabCluster\n"+tc.text+"nodes: [{name: cp1, role: control-plane}]\n")
		c, err := lab.LoadCluster(desc)
		if err != nil {
			t.Fatal(err)
		}
		l := lab.Lab{Cluster: c, Package: fakePackage(t), Registry: registry}
		for verb, bringUp := range map[string]func() error{
			"up":   func() error { _, err := l.Up(t.Context(), make(chan lab.Event, 100)); return err },
			"boot": func() error { return l.Boot(t.Context(), lab.Inputs{}) },
		} {
			err := bringUp()
			var refused *lab.InputError
			if !errors.As(err, &refused) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "kubeboot lab down --cluster /labs/other.yaml") {
				t.Errorf("%s of %s: %v, want an InputError with %q and the fix", verb, tc.name, err, tc.want)
			}
			if entries, _ := os.ReadDir(registry); len(entries) != 1 {
				t.Errorf("%s of %s: the registry holds %d entries after the refusal, want the other lab's alone", verb, tc.name, len(entries))
			}
		}
	}
}

// TestLabDownRefusesAnotherDescriptionsLab: a lab of the same name as
// one that is up from another directory (another description's, as
// another test run's) is refused by Down, which removes nothing of it,
// naming the description that brings it down.
func TestLabDownRefusesAnotherDescriptionsLab(t *testing.T) {
	registry := filepath.Join(t.TempDir(), "labs")
	other := t.TempDir()
	registeredLab(t, registry, lab.Entry{Name: "lab", Dir: other, Subnet: "10.89.0.0/24", PodSubnet: "10.245.0.0/16"})
	if err := os.WriteFile(filepath.Join(other, "haproxy.pid"), []byte("1 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	desc := writeDescription(t, header+"subnet: 10.89.0.0/24\npodSubnet: 10.245.0.0/16\nnodes: [{name: cp1, role: control-plane}]\n")
	c, err := lab.LoadCluster(desc)
	if err != nil {
		t.Fatal(err)
	}
	err = lab.Lab{Cluster: c, Registry: registry}.Down(t.Context())
	if err == nil || !strings.Contains(err.Error(), "the lab lab that is up is another description's (/labs/lab.yaml, dir "+other+")") ||
		!strings.Contains(err.Error(), "kubeboot lab down --cluster /labs/lab.yaml") {
		t.Errorf("lab down of another description's lab: %v", err)
	}
	if labs, _ := lab.List(registry); len(labs) != 1 {
		t.Errorf("after the refusal the registry holds %v, want the other lab's entry", labs)
	}
	if _, err := os.Stat(filepath.Join(other, "haproxy.pid")); err != nil {
		t.Errorf("the refusal touched the other lab's dir: %v", err)
	}
}

// TestList: the registry's labs by name; no registry, no lab.
func TestList(t *testing.T) {
	registry := filepath.Join(t.TempDir(), "labs")
	if labs, err := lab.List(registry); err != nil || len(labs) != 0 {
		t.Errorf("a registry that does not exist: %v, %v", labs, err)
	}
	registeredLab(t, registry, lab.Entry{Name: "b", Dir: "/tmp/kb-b", Subnet: "10.89.2.0/24", PodSubnet: "10.245.0.0/16"})
	registeredLab(t, registry, lab.Entry{Name: "a", Dir: "/tmp/kb-a", Subnet: "10.89.1.0/24", PodSubnet: "10.244.0.0/16"})
	labs, err := lab.List(registry)
	if err != nil {
		t.Fatal(err)
	}
	want := []lab.Entry{
		{Name: "a", Description: "/labs/a.yaml", Dir: "/tmp/kb-a", Subnet: "10.89.1.0/24", PodSubnet: "10.244.0.0/16", Nodes: []string{"cp1"}, Endpoint: "127.0.0.1:40001", Started: time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)},
		{Name: "b", Description: "/labs/b.yaml", Dir: "/tmp/kb-b", Subnet: "10.89.2.0/24", PodSubnet: "10.245.0.0/16", Nodes: []string{"cp1"}, Endpoint: "127.0.0.1:40001", Started: time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)},
	}
	if diff := cmp.Diff(want, labs); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}

// TestLabDownUnregisters: lab down removes the lab's entry, then the
// registry's directory once it is empty, and leaves another lab's.
func TestLabDownUnregisters(t *testing.T) {
	parent := t.TempDir()
	registry := filepath.Join(parent, "kubeboot-labs")
	dir := filepath.Join(parent, "dir")
	registeredLab(t, registry, lab.Entry{Name: "lab", Dir: dir, Subnet: "10.89.0.0/24", PodSubnet: "10.245.0.0/16"})
	registeredLab(t, registry, lab.Entry{Name: "other", Dir: "/tmp/kb-other", Subnet: "10.89.5.0/24", PodSubnet: "10.250.0.0/16"})
	down := func() {
		t.Helper()
		c, err := lab.LoadCluster(writeDescription(t, strings.Replace(header, "/tmp/kb-lab", dir, 1)+
			"subnet: 10.89.0.0/24\npodSubnet: 10.245.0.0/16\nnodes: [{name: cp1, role: control-plane}]\n"))
		if err != nil {
			t.Fatal(err)
		}
		if err := (lab.Lab{Cluster: c, Registry: registry}).Down(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	requireRoot(t, "bringing a lab down")
	down()
	if labs, _ := lab.List(registry); len(labs) != 1 || labs[0].Name != "other" {
		t.Errorf("after lab down: %v, want the other lab alone", labs)
	}
	if err := os.Remove(filepath.Join(registry, "other.json")); err != nil {
		t.Fatal(err)
	}
	registeredLab(t, registry, lab.Entry{Name: "lab", Dir: dir})
	down()
	if _, err := os.Stat(registry); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the empty registry is still there: %v", err)
	}
}
