package fleet_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/csrapprover"
	"github.com/kubeboot/kubeboot/internal/fleet"
	"github.com/kubeboot/kubeboot/pki"
)

// example is the fleet the repository ships.
const example = "../../examples/fleet.yaml"

// generate loads path and generates its fleet into dir.
func generate(t *testing.T, path, dir string) *fleet.Result {
	t.Helper()
	d, err := fleet.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := fleet.NewPlan(d, dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Write()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// state is each file under dir with its mode and modification time.
func state(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if e.IsDir() {
			data, err = nil, nil
		}
		files[strings.TrimPrefix(path, dir)] = info.Mode().String() + " " + info.ModTime().Format(time.RFC3339Nano) + " " + string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestGenerateExample: examples/fleet.yaml gives every node a file its
// node loads as valid, of its kind, with the shared token, the first
// control-plane node's carrying the CA that the others pin; secrets are
// 0600. A second run changes no byte, and a node added to the
// description gets its file alone.
func TestGenerateExample(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fleet")
	r := generate(t, example, dir)

	caCert, err := os.ReadFile(filepath.Join(dir, fleet.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	hash, err := pki.CACertHash(caCert)
	if err != nil || r.CACertHash != hash {
		t.Fatalf("the result's pin %q, the CA's %q (%v)", r.CACertHash, hash, err)
	}
	if pin, _ := os.ReadFile(filepath.Join(dir, fleet.CACertHashFile)); strings.TrimSpace(string(pin)) != hash {
		t.Errorf("%s holds %q, want %s", fleet.CACertHashFile, pin, hash)
	}
	token, _ := os.ReadFile(filepath.Join(dir, fleet.TokenFile))
	kinds := map[string]string{"cp1": config.KindClusterConfiguration, "cp2": config.KindJoinConfiguration, "cp3": config.KindJoinConfiguration,
		"w1": config.KindWorkerConfiguration, "w2": config.KindWorkerConfiguration}
	// The first node's init creates each worker's token, bound to it.
	bound, workerTokens := map[string]string{}, map[string]string{}
	for name, kind := range kinds {
		path := filepath.Join(dir, r.Nodes[name])
		doc, err := config.Load(path, config.Env{Host: config.Host{Name: "other", Address: "192.0.2.1"}})
		if err != nil {
			t.Fatalf("node %s: %v", name, err)
		}
		if doc.Kind() != kind {
			t.Errorf("node %s: a %s, want a %s", name, doc.Kind(), kind)
		}
		switch {
		case doc.Cluster != nil:
			c := doc.Cluster
			if c.Node.Name != name || c.Node.AdvertiseAddress != "10.0.0.11" || c.Certificates.CA == nil || c.Certificates.CA.Cert != string(caCert) ||
				len(c.BootstrapTokens) != 3 || c.BootstrapTokens[0].Token != strings.TrimSpace(string(token)) || c.ControlPlaneEndpoint != "10.0.0.100:6443" || c.ClusterName != "prod" {
				t.Errorf("node %s: node %+v, endpoint %s, cluster %s, CA carried %v, tokens %d", name, c.Node, c.ControlPlaneEndpoint, c.ClusterName, c.Certificates.CA != nil, len(c.BootstrapTokens))
			}
			for _, bt := range c.BootstrapTokens[1:] {
				bound[bt.Token] = strings.Join(bt.Groups, " ")
			}
		case doc.Join != nil:
			j := doc.Join
			if j.Certificates.CA != nil || j.Join.Discovery.Token != strings.TrimSpace(string(token)) || !slices.Equal(j.Join.Discovery.CACertHashes, []string{hash}) ||
				j.Join.Discovery.APIServerEndpoint != "10.0.0.100:6443" || j.Join.CertificateKey == "" {
				t.Errorf("node %s: %+v (CA carried: %v)", name, j.Join, j.Certificates.CA != nil)
			}
		case doc.Worker != nil:
			w := doc.Worker
			workerTokens[name] = w.Discovery.Token
			if w.Node.Name != name || !slices.Equal(w.Discovery.CACertHashes, []string{hash}) || w.Discovery.Token == strings.TrimSpace(string(token)) ||
				fmt.Sprint(w.Kubelet.ExtraConfig["maxPods"]) != "200" {
				t.Errorf("node %s: node %+v, discovery %+v, kubelet %+v", name, w.Node, w.Discovery, w.Kubelet)
			}
			if got := w.Node.Labels["disk"]; (name == "w2") != (got == "ssd") {
				t.Errorf("node %s: label disk=%q: only w2's patch sets it", name, got)
			}
		}
	}
	for _, w := range []string{"w1", "w2"} {
		if got, want := bound[workerTokens[w]], csrapprover.BoundGroup+" "+csrapprover.BoundNodeGroup(w); got != want {
			t.Errorf("%s's token is in groups %q in cp1's file, want %q", w, got, want)
		}
	}
	for _, name := range []string{fleet.TokenFile, fleet.NodeTokensFile, fleet.CertificateKeyFile, fleet.CAKeyFile, fleet.ConfigCAKeyFile, r.Nodes["cp1"], r.Nodes["w1"]} {
		if info, err := os.Stat(filepath.Join(dir, name)); err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", name, info.Mode(), err)
		}
	}

	// The files are signed by the fleet's config CA, a CA of its own,
	// whose pin is the machines'.
	configCert, err := os.ReadFile(filepath.Join(dir, fleet.ConfigCACertFile))
	if err != nil {
		t.Fatal(err)
	}
	configHash, err := pki.CACertHash(configCert)
	if err != nil || r.ConfigCAHash != configHash || configHash == hash {
		t.Fatalf("the result's config CA pin %q, the config CA's %q (%v), the cluster CA's %s", r.ConfigCAHash, configHash, err, hash)
	}
	if pin, _ := os.ReadFile(filepath.Join(dir, fleet.ConfigCAHashFile)); strings.TrimSpace(string(pin)) != configHash {
		t.Errorf("%s holds %q, want %s", fleet.ConfigCAHashFile, pin, configHash)
	}
	ca, err := fleet.ParseCA(configCert)
	if err != nil {
		t.Fatal(err)
	}
	for name, file := range r.Nodes {
		data, _ := os.ReadFile(filepath.Join(dir, file))
		sig, _ := os.ReadFile(filepath.Join(dir, file+".sig"))
		if err := fleet.Verify(ca, data, string(sig)); err != nil {
			t.Errorf("node %s's signature: %v", name, err)
		}
		if err := fleet.Verify(ca, append(data, '#'), string(sig)); err == nil {
			t.Errorf("node %s's signature verifies a changed file", name)
		}
	}
	if macs, _ := os.ReadFile(filepath.Join(dir, fleet.MACsFile)); string(macs) != "52:54:00:00:01:21 w1\n52:54:00:00:01:22 w2\n" {
		t.Errorf("%s: %q", fleet.MACsFile, macs)
	}

	before := state(t, dir)
	again := generate(t, example, dir)
	if len(again.Written) != 0 {
		t.Errorf("a second run wrote %v", again.Written)
	}
	if after := state(t, dir); !equal(before, after) {
		t.Error("a second run changed the directory")
	}

	data, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	bigger := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(bigger, append(data, "- {name: w3, role: worker, address: 10.0.1.23}\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	if len(again.ToAdmit) != 0 {
		t.Errorf("every worker's token is in cp1's file, yet %v are to admit", again.ToAdmit)
	}
	added := generate(t, bigger, dir)
	// cp1's file, with which cp1 has run init, stays as it was: w3's token
	// is made in the running cluster instead.
	if want := []string{fleet.NodeTokensFile, "nodes/w3.yaml", "nodes/w3.yaml.sig"}; !slices.Equal(added.Written, want) {
		t.Errorf("with w3 added, the run wrote %v, want %v", added.Written, want)
	}
	if !slices.Equal(added.ToAdmit, []string{"w3"}) {
		t.Errorf("with w3 added, %v are to admit, want [w3]", added.ToAdmit)
	}
	d, err := fleet.Load(bigger)
	if err != nil {
		t.Fatal(err)
	}
	p, err := fleet.NewPlan(d, dir)
	if err != nil {
		t.Fatal(err)
	}
	w3, _ := os.ReadFile(filepath.Join(dir, added.Nodes["w3"]))
	for _, w := range p.Workers {
		if w.InFirstFile != (w.Node != "w3") || w.Token.TTL == nil || w.Token.TTL.Duration != 7*24*time.Hour ||
			!slices.Equal(w.Token.Groups, []string{csrapprover.BoundGroup, csrapprover.BoundNodeGroup(w.Node)}) {
			t.Errorf("worker %s's token: in cp1's file %v, %+v", w.Node, w.InFirstFile, w.Token)
		}
		if w.Node == "w3" && !strings.Contains(string(w3), w.Token.Token) {
			t.Error("w3's token to admit is not the one its file holds")
		}
	}

	// Once cp1's file is gone (before the cluster is made), it is written
	// anew, listing every worker.
	if err := os.Remove(filepath.Join(dir, r.Nodes["cp1"])); err != nil {
		t.Fatal(err)
	}
	if anew := generate(t, bigger, dir); len(anew.ToAdmit) != 0 || !slices.Contains(anew.Written, "nodes/cp1.yaml") {
		t.Errorf("cp1's file made anew: wrote %v, %v to admit", anew.Written, anew.ToAdmit)
	}
}

// equal compares two directory states.
func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestRefusals: a description the fleet cannot make files of is refused
// with its file, field and fix, and nothing is written.
func TestRefusals(t *testing.T) {
	head := "apiVersion: kubeboot.io/v1alpha1\nkind: Fleet\n"
	one := "nodes:\n- {name: cp1, role: control-plane, address: 10.0.0.11}\n"
	tests := []struct {
		name, text, want string
	}{
		{"another kind", "apiVersion: kubeboot.io/v1alpha1\nkind: LabCluster\n" + one, `apiVersion/kind: got "kubeboot.io/v1alpha1"/"LabCluster", want kubeboot.io/v1alpha1/Fleet`},
		{"an unknown field", head + "clusters: {}\n" + one, `unknown field "clusters"`},
		{"no control-plane node", head + "nodes:\n- {name: w1, role: worker, address: 10.0.0.21}\n", "nodes: no node has role control-plane"},
		{"a name twice", head + one + "- {name: cp1, role: worker, address: 10.0.0.12}\n", `nodes[1].name: "cp1": named twice`},
		{"a bad role", head + "nodes:\n- {name: cp1, role: master, address: 10.0.0.11}\n", `nodes[0].role: "master": want control-plane or worker`},
		{"a bad address", head + "nodes:\n- {name: cp1, role: control-plane, address: cp1.example}\n", `nodes[0].address: "cp1.example": want the node's IP address`},
		{"two control-plane nodes, no endpoint", head + one + "- {name: cp2, role: control-plane, address: 10.0.0.12}\n", "cluster.controlPlaneEndpoint: unset, with 2 control-plane nodes"},
		{"a field the fleet sets", head + "cluster: {certificateKey: abc}\n" + one, "cluster.certificateKey: the fleet sets it: remove it"},
		{"the CA", head + "cluster: {certificates: {ca: {cert: x, key: y}}}\n" + one, "cluster.certificates.ca: the fleet makes the CA once"},
		{"a worker's discovery", head + "worker: {discovery: {}}\n" + one, "worker.discovery: the fleet sets it"},
		{"a secondary address of the same family", head + "nodes:\n- {name: cp1, role: control-plane, address: 10.0.0.11, secondaryAddress: 10.0.0.12}\n",
			`nodes[0].secondaryAddress: "10.0.0.12": want the node's IP address of the other family than its address`},
		{"a bad MAC", head + "nodes:\n- {name: cp1, role: control-plane, address: 10.0.0.11, mac: 52-54-00-00-01-21}\n", `nodes[0].mac: "52-54-00-00-01-21": want a lower-case MAC address`},
		{"a MAC twice", head + "nodes:\n- {name: cp1, role: control-plane, address: 10.0.0.11, mac: \"52:54:00:00:01:21\"}\n- {name: w1, role: worker, address: 10.0.0.21, mac: \"52:54:00:00:01:21\"}\n", `nodes[1].mac: "52:54:00:00:01:21": given twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fleet.yaml")
			if err := os.WriteFile(path, []byte(tt.text), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := fleet.Load(path)
			if err == nil || !strings.Contains(err.Error(), path+": ") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q naming %s", err, tt.want, path)
			}
		})
	}
}

// TestGenerateDualStack: a dual-stack fleet's nodes get both of their
// addresses in their files, which their nodes load as valid.
func TestGenerateDualStack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	text := "apiVersion: kubeboot.io/v1alpha1\nkind: Fleet\n" +
		"cluster: {networking: {podSubnet: '10.244.0.0/16,fd10:244::/56', serviceSubnet: '10.96.0.0/12,fd10:96::/112'}}\n" +
		"nodes:\n- {name: cp1, role: control-plane, address: 10.0.0.11, secondaryAddress: 'fd00:89::11'}\n" +
		"- {name: w1, role: worker, address: 10.0.0.21, secondaryAddress: 'fd00:89::21'}\n- {name: w2, role: worker, address: 10.0.0.22}\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "fleet")
	r := generate(t, path, dir)
	got := map[string]string{}
	for name, file := range r.Nodes {
		doc, err := config.Load(filepath.Join(dir, file), config.Env{Host: config.Host{Name: "other", Address: "192.0.2.1"}})
		if err != nil {
			t.Fatalf("node %s: %v", name, err)
		}
		if c := doc.Cluster; c != nil {
			got[name] = c.Node.AdvertiseAddress + " " + c.Node.SecondaryAddress
		} else {
			got[name] = doc.Worker.Node.Address + " " + doc.Worker.Node.SecondaryAddress
		}
	}
	want := map[string]string{"cp1": "10.0.0.11 fd00:89::11", "w1": "10.0.0.21 fd00:89::21", "w2": "10.0.0.22 "}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the nodes' addresses: got %v, want %v", got, want)
	}
}

// TestInvalidNodeFile: settings that would make a node's file invalid are
// refused before anything is written, naming the node and the field.
func TestInvalidNodeFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	text := "apiVersion: kubeboot.io/v1alpha1\nkind: Fleet\ncluster: {networking: {podSubnet: 10.244.0.1/16}}\n" +
		"nodes:\n- {name: cp1, role: control-plane, address: 10.0.0.11}\n- {name: w1, role: worker, address: 10.0.0.21, patch: {kubelet: {configFile: kubelet.yaml}}}\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := fleet.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "fleet")
	_, err = fleet.NewPlan(d, dir)
	for _, want := range []string{
		path + ": node cp1's file would be refused: networking.podSubnet: Invalid value: \"10.244.0.1/16\": has host bits set",
		path + ": node w1's file would be refused: kubelet.configFile",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %q", err, want)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the refused run made %s (%v)", dir, err)
	}
}

// TestGenerateAfterCARotation: after `certs rotate-ca`, the cluster's new
// CA copied into the fleet's directory makes every node's file anew: the
// first node's carries it, the others pin it, and the token stays; the
// files are still signed by the config CA, whose pin the machines keep.
func TestGenerateAfterCARotation(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fleet")
	before := generate(t, example, dir)
	token, _ := os.ReadFile(filepath.Join(dir, fleet.TokenFile))
	// Another fleet's CA stands for the rotated one.
	other := filepath.Join(t.TempDir(), "other")
	generate(t, example, other)
	for _, name := range []string{fleet.CACertFile, fleet.CAKeyFile} {
		data, err := os.ReadFile(filepath.Join(other, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	after := generate(t, example, dir)
	caCert, _ := os.ReadFile(filepath.Join(dir, fleet.CACertFile))
	hash, err := pki.CACertHash(caCert)
	if err != nil {
		t.Fatal(err)
	}
	if after.CACertHash != hash || after.CACertHash == before.CACertHash {
		t.Fatalf("the pin after the CA changed: %s, before %s, want the new CA's %s", after.CACertHash, before.CACertHash, hash)
	}
	if after.ConfigCAHash != before.ConfigCAHash {
		t.Errorf("the machines' pin changed with the cluster CA: %s, before %s", after.ConfigCAHash, before.ConfigCAHash)
	}
	configCert, _ := os.ReadFile(filepath.Join(dir, fleet.ConfigCACertFile))
	ca, err := fleet.ParseCA(configCert)
	if err != nil {
		t.Fatal(err)
	}
	for name, file := range after.Nodes {
		data, _ := os.ReadFile(filepath.Join(dir, file))
		sig, _ := os.ReadFile(filepath.Join(dir, file+".sig"))
		if err := fleet.Verify(ca, data, string(sig)); err != nil {
			t.Errorf("node %s's file is not signed by the config CA: %v", name, err)
		}
		doc, err := config.Load(filepath.Join(dir, file), config.Env{Host: config.Host{Name: "other", Address: "192.0.2.1"}})
		if err != nil {
			t.Fatalf("node %s: %v", name, err)
		}
		switch {
		case doc.Cluster != nil:
			if c := doc.Cluster; c.Certificates.CA == nil || c.Certificates.CA.Cert != string(caCert) || c.BootstrapTokens[0].Token != strings.TrimSpace(string(token)) {
				t.Errorf("node %s does not carry the new CA with the same token", name)
			}
		case doc.Join != nil:
			if !slices.Equal(doc.Join.Join.Discovery.CACertHashes, []string{hash}) {
				t.Errorf("node %s pins %v, want %s", name, doc.Join.Join.Discovery.CACertHashes, hash)
			}
		case doc.Worker != nil:
			if !slices.Equal(doc.Worker.Discovery.CACertHashes, []string{hash}) {
				t.Errorf("node %s pins %v, want %s", name, doc.Worker.Discovery.CACertHashes, hash)
			}
		}
	}
}
