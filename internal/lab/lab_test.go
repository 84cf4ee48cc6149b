package lab_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/csrapprover"
	"github.com/kubeboot/kubeboot/internal/lab"
	"github.com/kubeboot/kubeboot/pki"
)

// TestLabNodeFiles: a lab of machines gives each node one file that
// kubeboot loads as it stands (the first control-plane node inits, the
// second joins with the certificate key, a worker joins), all through the
// cluster's endpoint with one fresh cluster-wide token pinning the CA (a
// kubeboot worker with its own, bound to it), and kubeadm's
// worker a JoinConfiguration of the same; another lab draws another token.
func TestLabNodeFiles(t *testing.T) {
	desc := writeDescription(t, header+"subnet: 10.89.0.0/24\npodSubnet: 10.245.0.0/16\nkubernetesVersion: v1.35.4\n"+
		"nodes: [{name: cp1, role: control-plane}, {name: cp2, role: control-plane}, {name: w1, role: worker}, {name: w2, role: worker, join: kubeadm}]\n")
	c, err := lab.LoadCluster(desc)
	if err != nil {
		t.Fatal(err)
	}
	l := lab.Lab{Cluster: c}
	kubeboot, kubeadm, hash, err := l.NodeFiles()
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]bool{}
	for i, kind := range []string{config.KindClusterConfiguration, config.KindJoinConfiguration, config.KindWorkerConfiguration} {
		name := c.Nodes[i].Name
		path := filepath.Join(t.TempDir(), "node.yaml")
		if err := os.WriteFile(path, []byte(kubeboot[i]), 0o600); err != nil {
			t.Fatal(err)
		}
		doc, err := config.Load(path, config.Env{Host: config.Host{Name: name}, Kinds: []string{kind}})
		if err != nil {
			t.Fatalf("%s's file does not load as a %s: %v\n%s", name, kind, err, kubeboot[i])
		}
		switch {
		case doc.Cluster != nil:
			if doc.Cluster.ControlPlaneEndpoint != "10.89.0.1:6443" || doc.Cluster.KubernetesVersion != "v1.35.4" || doc.Cluster.Node.Name != name {
				t.Errorf("%s: endpoint %q, release %q, name %q", name, doc.Cluster.ControlPlaneEndpoint, doc.Cluster.KubernetesVersion, doc.Cluster.Node.Name)
			}
			// The CA comes with the file, made by the fleet's code, and
			// it is the one the other nodes pin.
			if ca := doc.Cluster.Certificates.CA; ca == nil {
				t.Errorf("%s's file carries no CA", name)
			} else if got, err := pki.CACertHash([]byte(ca.Cert)); err != nil || got != hash {
				t.Errorf("%s carries a CA of hash %s (%v), the others pin %s", name, got, err, hash)
			}
			// kube-proxy leaves the host's conntrack table alone.
			if conntrack, _ := doc.Cluster.Addons.KubeProxy.ExtraConfig["conntrack"].(map[string]any); fmt.Sprint(conntrack["maxPerCore"]) != "0" {
				t.Errorf("%s: kube-proxy's extraConfig %v, want conntrack.maxPerCore 0", name, doc.Cluster.Addons.KubeProxy.ExtraConfig)
			}
		case doc.Join != nil:
			if doc.Join.Join.CertificateKey == "" || doc.Join.Node.AdvertiseAddress != "10.89.0.11" {
				t.Errorf("%s joins without the certificate key or at %q", name, doc.Join.Node.AdvertiseAddress)
			}
		case doc.Worker != nil:
			if doc.Worker.Discovery.APIServerEndpoint != "10.89.0.1:6443" {
				t.Errorf("%s discovers the cluster at %q", name, doc.Worker.Discovery.APIServerEndpoint)
			}
		}
		if !strings.Contains(kubeboot[i], hash) && i > 0 {
			t.Errorf("%s's file does not pin the CA:\n%s", name, kubeboot[i])
		}
		if i < 2 {
			tokens[regexp.MustCompile(`[a-z0-9]{6}\.[a-z0-9]{16}`).FindString(kubeboot[i])] = true
		}
	}
	if !strings.Contains(kubeadm[3], "kind: JoinConfiguration") || !strings.Contains(kubeadm[3], "apiVersion: kubeadm.k8s.io/v1beta4") || !strings.Contains(kubeadm[3], hash) || kubeboot[3] != "" {
		t.Errorf("kubeadm's worker is given:\n%s\nand kubeboot's file %q", kubeadm[3], kubeboot[3])
	}
	tokens[regexp.MustCompile(`[a-z0-9]{6}\.[a-z0-9]{16}`).FindString(kubeadm[3])] = true
	// One cluster-wide token, first in each file; the kubeboot worker's own
	// is bound to it, and listed in cp1's for its init to create.
	if len(tokens) != 1 || tokens[""] {
		t.Errorf("the nodes' tokens: %v, want one", tokens)
	}
	w1Token := regexp.MustCompile(`token: ([a-z0-9]{6}\.[a-z0-9]{16})`).FindStringSubmatch(kubeboot[2])
	if w1Token == nil || tokens[w1Token[1]] || !strings.Contains(kubeboot[0], "- "+csrapprover.BoundNodeGroup("w1")+"\n  token: "+w1Token[1]+"\n") {
		t.Errorf("w1's token %v is not bound to it in cp1's file:\n%s", w1Token, kubeboot[0])
	}
	again, _, _, err := l.NodeFiles()
	if err != nil || again[0] == kubeboot[0] {
		t.Errorf("a second lab's first file is the first's: %v", err)
	}
}

// TestLabMachine: a node is found by its name, in the lab's dir on
// its network namespace; another name is refused, naming the nodes.
func TestLabMachine(t *testing.T) {
	c, err := lab.LoadCluster(writeDescription(t, header+"subnet: 10.89.0.0/24\npodSubnet: 10.245.0.0/16\nnodes: [{name: cp1, role: control-plane}, {name: w1, role: worker}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := c.Address6(1); ok {
		t.Errorf("an IPv4 lab's w1 has the IPv6 address %v", a)
	}
	l := lab.Lab{Cluster: c, BinDir: "/bin-dir"}
	m, err := l.Machine("w1")
	if err != nil || m.Dir != "/tmp/kb-lab/w1" || m.NetNS != "/run/netns/kb-lab-w1" || m.UsrLayers[0] != "/tmp/kb-lab/usr" {
		t.Errorf("w1: %+v, %v", m, err)
	}
	if _, err := l.Machine("w2"); err == nil || !strings.Contains(err.Error(), `no node "w2": its nodes are cp1, w1`) {
		t.Errorf("w2: %v", err)
	}
}

// TestForwardEvents: a bootstrap unit's journal becomes the node's events,
// the lines that are no events (systemd's own, a failed attempt's result)
// are left out, and only a result that says the run succeeded ends it.
func TestForwardEvents(t *testing.T) {
	journal := strings.Join([]string{
		`Starting kubeboot-bootstrap.service - kubeboot: bring this node up from /etc/kubeboot/node.yaml...`,
		`{"level":"info","msg":"all checks passed","phase":"preflight","time":"2026-11-27T07:21:00Z"}`,
		`{"level":"warning","msg":"attempt 1 failed (exit code 1): boom; retrying in 10s","phase":"","time":"2026-11-27T07:21:01Z"}`,
		`{"result":{"ok":false,"exitCode":1}}`,
		`{"level":"info","msg":"Node w1 is Ready","phase":"kubelet-wait-bootstrap","time":"2026-11-27T07:21:20Z"}`,
		`{"result":{"ok":true,"exitCode":0}}`,
		`{"level":"info","msg":"after the result","phase":"late","time":"2026-11-27T07:21:21Z"}`,
	}, "\n") + "\n"
	events := make(chan lab.Event, 10)
	converged := make(chan struct{})
	lab.ForwardEvents(strings.NewReader(journal), "w1", events, converged)
	close(events)
	var got []string
	for e := range events {
		got = append(got, e.Node+" "+e.Phase+" "+e.Level+" "+e.Msg)
	}
	want := []string{
		"w1 preflight info all checks passed",
		"w1  warning attempt 1 failed (exit code 1): boom; retrying in 10s",
		"w1 kubelet-wait-bootstrap info Node w1 is Ready",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	select {
	case <-converged:
	default:
		t.Error("the successful result did not end the following")
	}

	unfinished := make(chan struct{})
	lab.ForwardEvents(strings.NewReader(`{"result":{"ok":false,"exitCode":2}}`+"\n"), "w1", make(chan lab.Event, 1), unfinished)
	select {
	case <-unfinished:
		t.Error("a failed result counted as converged")
	default:
	}
}

// TestLabKubeadmInit: a lab whose one node the real kubeadm inits
// gives it kubeadm's configuration of the same cluster, untainted, with
// kube-proxy in nftables mode, and no file of kubeboot's to run.
func TestLabKubeadmInit(t *testing.T) {
	c, err := lab.LoadCluster(writeDescription(t, header+"subnet: 10.89.0.0/24\npodSubnet: 10.245.0.0/16\n"+
		"nodes: [{name: cp1, role: control-plane, init: kubeadm}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, kubeadm, _, err := lab.Lab{Cluster: c}.NodeFiles()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kind: InitConfiguration", "advertiseAddress: 10.89.0.10", "taints: []", "kind: ClusterConfiguration",
		"kubernetesVersion: " + config.DefaultKubernetesVersion, "encryptionAlgorithm: ECDSA-P256", "podSubnet: 10.245.0.0/16",
		"kind: KubeletConfiguration", "failCgroupV1: false", "kind: KubeProxyConfiguration", "mode: nftables", "maxPerCore: 0"} {
		if !strings.Contains(kubeadm[0], want) {
			t.Errorf("kubeadm's configuration lacks %q:\n%s", want, kubeadm[0])
		}
	}
}

// TestDualStackNodeFiles: a dual-stack lab gives every node both of its
// addresses and the cluster both families' ranges, in kubeboot's files
// and kubeadm's alike.
func TestDualStackNodeFiles(t *testing.T) {
	c, err := lab.LoadCluster(writeDescription(t, header+"subnet: '10.89.0.0/24,fd89:0:0:7::/64'\n"+
		"podSubnet: '10.245.0.0/16,fd10:245::/56'\nserviceSubnet: '10.96.0.0/12,fd10:96::/112'\n"+
		"nodes: [{name: cp1, role: control-plane}, {name: w1, role: worker}, {name: w2, role: worker, join: kubeadm}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := c.Address6(1); !ok || a.String() != "fd89:0:0:7::b" || c.Address(1).String() != "10.89.0.11" {
		t.Errorf("w1's addresses: %v %v (%v)", c.Address(1), a, ok)
	}
	kubeboot, kubeadm, _, err := lab.Lab{Cluster: c}.NodeFiles()
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range [][]string{
		{"advertiseAddress: 10.89.0.10", "secondaryAddress: fd89:0:0:7::a", "podSubnet: 10.245.0.0/16,fd10:245::/56", "serviceSubnet: 10.96.0.0/12,fd10:96::/112"},
		{"address: 10.89.0.11", "secondaryAddress: fd89:0:0:7::b"},
	} {
		for _, w := range want {
			if !strings.Contains(kubeboot[i], w) {
				t.Errorf("node %d's file lacks %q:\n%s", i, w, kubeboot[i])
			}
		}
	}
	if !strings.Contains(kubeadm[2], "- name: node-ip\n    value: 10.89.0.12,fd89:0:0:7::c") {
		t.Errorf("kubeadm's JoinConfiguration lacks both node IPs:\n%s", kubeadm[2])
	}
}

// TestLabUpRefusesALabNotBroughtDown: a node's disk left by an
// earlier lab of the description is refused, by Up (naming the fix) and
// by Boot, before anything is set up.
func TestLabUpRefusesALabNotBroughtDown(t *testing.T) {
	dir := t.TempDir()
	desc := writeDescription(t, strings.Replace(header, "/tmp/kb-lab", dir, 1)+"subnet: 10.89.0.0/24\npodSubnet: 10.245.0.0/16\n"+
		"nodes: [{name: cp1, role: control-plane}, {name: w1, role: worker}]\n")
	c, err := lab.LoadCluster(desc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "w1", "root"), 0o700); err != nil {
		t.Fatal(err)
	}
	events := make(chan lab.Event, 10)
	_, err = lab.Lab{Cluster: c}.Up(t.Context(), events)
	if err == nil || !strings.Contains(err.Error(), "node w1's disk "+filepath.Join(dir, "w1")+" exists") || !strings.Contains(err.Error(), "kubeboot lab down --cluster "+desc) {
		t.Errorf("lab up over a lab not brought down: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("lab up wrote into %s: %v", dir, entries)
	}
	if len(events) > 0 {
		t.Errorf("lab up reported progress: %+v", <-events)
	}
	var refused *lab.InputError
	if err := (lab.Lab{Cluster: c}).Boot(t.Context(), lab.Inputs{}); !errors.As(err, &refused) || !strings.Contains(err.Error(), "node w1's disk "+filepath.Join(dir, "w1")+" exists") {
		t.Errorf("Boot over a lab not brought down: %v, want the InputError", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("Boot wrote into %s: %v", dir, entries)
	}
}
