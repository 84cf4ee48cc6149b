package pki

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/internal/config"
)

// written lists the files a Set asks its caller to write.
func written(s Set) []string {
	var out []string
	for name, p := range s.Certs {
		if p.Cert != nil {
			out = append(out, name+".crt")
		}
		if p.Key != nil {
			out = append(out, name+".key")
		}
	}
	if s.ServiceAccount.Private != nil {
		out = append(out, "sa.key")
	}
	if s.ServiceAccount.Public != nil {
		out = append(out, "sa.pub")
	}
	for name := range s.Kubeconfigs {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// merge returns have with the files of update applied, as the caller
// would leave the node after writing them.
func merge(have, update Set) Set {
	out := Set{Certs: map[string]KeyPair{}, ServiceAccount: have.ServiceAccount, Kubeconfigs: map[string][]byte{}}
	maps.Copy(out.Certs, have.Certs)
	maps.Copy(out.Kubeconfigs, have.Kubeconfigs)
	for name, p := range update.Certs {
		old := out.Certs[name]
		if p.Cert != nil {
			old.Cert = p.Cert
		}
		if p.Key != nil {
			old.Key = p.Key
		}
		out.Certs[name] = old
	}
	if update.ServiceAccount.Private != nil {
		out.ServiceAccount.Private = update.ServiceAccount.Private
	}
	if update.ServiceAccount.Public != nil {
		out.ServiceAccount.Public = update.ServiceAccount.Public
	}
	maps.Copy(out.Kubeconfigs, update.Kubeconfigs)
	return out
}

// without returns a copy of s lacking the named files.
func without(s Set, files ...string) Set {
	out := merge(s, Set{})
	for _, f := range files {
		switch {
		case f == "sa.key":
			out.ServiceAccount.Private = nil
		case f == "sa.pub":
			out.ServiceAccount.Public = nil
		case strings.HasSuffix(f, ".crt"), strings.HasSuffix(f, ".key"):
			name := f[:len(f)-4]
			p := out.Certs[name]
			if strings.HasSuffix(f, ".crt") {
				p.Cert = nil
			} else {
				p.Key = nil
			}
			out.Certs[name] = p
		default:
			delete(out.Kubeconfigs, f)
		}
	}
	return out
}

func TestEnsureConverges(t *testing.T) {
	cfg := testConfig(t, nil)
	full := ensureAll(t, cfg)
	tests := []struct {
		name    string
		missing []string
		names   []string
		want    []string
	}{
		{name: "re-run writes nothing"},
		{name: "missing leaf", missing: []string{"apiserver.crt", "apiserver.key"}, want: []string{"apiserver.crt", "apiserver.key"}},
		{name: "key without certificate is kept", missing: []string{"etcd/peer.crt"}, want: []string{"etcd/peer.crt"}},
		{name: "missing CA and its leaf", missing: []string{"front-proxy-ca.crt", "front-proxy-ca.key", "front-proxy-client.crt", "front-proxy-client.key"},
			want: []string{"front-proxy-ca.crt", "front-proxy-ca.key", "front-proxy-client.crt", "front-proxy-client.key"}},
		{name: "lost sa.pub", missing: []string{"sa.pub"}, want: []string{"sa.pub"}},
		{name: "missing kubeconfig", missing: []string{"admin.conf"}, want: []string{"admin.conf"}},
		{name: "only the named", missing: []string{"admin.conf", "apiserver.crt", "apiserver.key"}, names: KubeconfigNames(cfg), want: []string{"admin.conf"}},
		{name: "external CA", missing: []string{"ca.key"}},
		{name: "external CA, missing sa", missing: []string{"ca.key", "sa.key", "sa.pub"}, want: []string{"sa.key", "sa.pub"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			have := without(full, tt.missing...)
			got, err := Ensure(cfg, have, time.Now(), tt.names)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, written(got)); diff != "" {
				t.Errorf("written files (-want +got):\n%s", diff)
			}
			after := merge(have, got)
			if tt.names == nil {
				verifyConverged(t, cfg, after)
			}
			if got, want := after.Certs["etcd/peer"].Key, full.Certs["etcd/peer"].Key; string(got) != string(want) {
				t.Error("etcd/peer.key changed")
			}
		})
	}
}

// verifyConverged checks that a node's PKI passes every check, whatever
// CA signed it.
func verifyConverged(t *testing.T, cfg *config.ClusterConfiguration, s Set) {
	t.Helper()
	now, window := time.Now(), cfg.Certificates.RenewBefore.Duration
	for _, spec := range CertSpecs(cfg) {
		if err := Check(spec, s.Certs[spec.Name], s.Certs[spec.CA].Cert, now, window); err != nil {
			t.Error(err)
		}
	}
	for _, k := range KubeconfigSpecs(cfg) {
		if err := CheckKubeconfig(k, s.Kubeconfigs[k.Name], s.Certs[config.CertCA].Cert, nil, now, window); err != nil {
			t.Error(err)
		}
	}
	if err := CheckServiceAccountKey(s.ServiceAccount); err != nil {
		t.Error(err)
	}
}

func TestEnsureUsesUserProvidedCA(t *testing.T) {
	cfg := testConfig(t, nil)
	caSpec := CertSpecs(cfg)[0]
	caSpec.CN, caSpec.Org, caSpec.Validity = "acme root", []string{"acme"}, 5*365*24*time.Hour
	userCA, err := NewCA(caSpec)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Ensure(cfg, Set{Certs: map[string]KeyPair{config.CertCA: userCA}}, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Certs[config.CertCA]; ok {
		t.Error("Ensure replaced the user's CA")
	}
	verifyConverged(t, cfg, merge(Set{Certs: map[string]KeyPair{config.CertCA: userCA}}, got))
}

func TestEnsureRefuses(t *testing.T) {
	cfg := testConfig(t, nil)
	full := ensureAll(t, cfg)
	now := time.Now()
	moreSANs := testConfig(t, func(c *config.ClusterConfiguration) { c.APIServer.CertSANs = []string{"10.0.0.100", "api.example.com"} })
	tests := []struct {
		name      string
		cfg       *config.ClusterConfiguration
		have      Set
		now       time.Time
		want      []string
		renewable bool
	}{
		{name: "new SANs", cfg: moreSANs, have: without(full, "admin.conf"), now: now, renewable: true,
			want: []string{"apiserver.crt: lacks DNS SAN api.example.com; lacks IP SAN 10.0.0.100"}},
		{name: "external CA, missing leaf and kubeconfig", cfg: cfg, have: without(full, "ca.key", "apiserver.crt", "apiserver.key", "admin.conf"), now: now,
			want: []string{`issue certificate "apiserver": ca.key is absent (external CA)`, `issue certificate "admin.conf": ca.key is absent (external CA)`}},
		{name: "leaf without its CA", cfg: cfg, have: without(full, "etcd/ca.crt", "etcd/ca.key"), now: now,
			want: []string{"etcd/server.crt: exists but its CA etcd/ca.crt does not", "etcd/peer.crt: exists but its CA etcd/ca.crt does not",
				"etcd/healthcheck-client.crt: exists but its CA etcd/ca.crt does not", "apiserver-etcd-client.crt: exists but its CA etcd/ca.crt does not"}},
		{name: "CA key without certificate, with leaves", cfg: cfg, have: without(full, "ca.crt"), now: now,
			want: []string{"apiserver.crt: exists but its CA ca.crt does not", "apiserver-kubelet-client.crt: exists but its CA ca.crt does not",
				"controller-manager.crt: exists but its CA ca.crt does not", "scheduler.crt: exists but its CA ca.crt does not",
				"kubelet-server.crt: exists but its CA ca.crt does not", "admin.conf: exists but its CA ca.crt does not", "super-admin.conf: exists but its CA ca.crt does not",
				"kubelet.conf: exists but its CA ca.crt does not", "controller-manager.conf: exists but its CA ca.crt does not",
				"scheduler.conf: exists but its CA ca.crt does not", "csr-approver.conf: exists but its CA ca.crt does not"}},
		{name: "sa.pub without sa.key", cfg: cfg, have: without(full, "sa.key"), now: now,
			want: []string{"sa.key: is missing while sa.pub exists"}},
		{name: "expired CA is reported once", cfg: cfg, have: full, now: now.Add(11 * 365 * 24 * time.Hour),
			want: []string{"ca.crt: expired on ", "front-proxy-ca.crt: expired on ", "etcd/ca.crt: expired on "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Ensure(tt.cfg, tt.have, tt.now, nil)
			if err == nil {
				t.Fatalf("Ensure wrote %v, want an error", written(got))
			}
			msgs := strings.Split(err.Error(), "\n")
			if len(msgs) != len(tt.want) {
				t.Errorf("got %d errors, want %d:\n%v", len(msgs), len(tt.want), err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			var ce *CheckError
			if errors.As(err, &ce) && ce.Renewable != tt.renewable {
				t.Errorf("renewable = %v, want %v", ce.Renewable, tt.renewable)
			}
		})
	}
}

func TestEnsureUnknownName(t *testing.T) {
	_, err := Ensure(testConfig(t, nil), Set{}, time.Now(), []string{"apiserver.crt"})
	if err == nil || !strings.HasPrefix(err.Error(), `find "apiserver.crt": not a certificate or kubeconfig`) {
		t.Errorf("error = %v", err)
	}
}

// keyOwners maps each distinct public key of a node to the files that
// hold it.
func keyOwners(t *testing.T, s Set) map[string][]string {
	t.Helper()
	owners := map[string][]string{}
	add := func(file string, keyPEM []byte) {
		key, err := parseKey(keyPEM)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		der, err := publicKeyPEM(privateKey{signer: key})
		if err != nil {
			t.Fatal(err)
		}
		owners[string(der)] = append(owners[string(der)], file)
	}
	for name, p := range s.Certs {
		add(name+".key", p.Key)
	}
	add("sa.key", s.ServiceAccount.Private)
	for name, data := range s.Kubeconfigs {
		_, user, err := currentContext(data)
		if err != nil {
			t.Fatal(err)
		}
		add(name, user.ClientKeyData)
	}
	return owners
}

// sharing lists the groups of files that hold the same key.
func sharing(owners map[string][]string) [][]string {
	var out [][]string
	for _, files := range owners {
		if len(files) > 1 {
			out = append(out, sorted(files))
		}
	}
	slices.SortFunc(out, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	return out
}

// TestSharedKeys checks that the controller-manager and the scheduler each
// get one key pair for serving and for their kubeconfig, and that no other
// file shares a key.
func TestSharedKeys(t *testing.T) {
	cfg := testConfig(t, nil)
	full := ensureAll(t, cfg)
	cm := []string{"controller-manager.conf", "controller-manager.key"}
	kubelet := []string{"kubelet-server.key", "kubelet.conf"}
	scheduler := []string{"scheduler.conf", "scheduler.key"}
	want := [][]string{cm, kubelet, scheduler}
	owners := keyOwners(t, full)
	if diff := cmp.Diff(want, sharing(owners)); diff != "" {
		t.Errorf("fresh PKI: files sharing a key (-want +got):\n%s", diff)
	}
	// kubeadm generates 16 keys; kubeboot issues three more certificates
	// (two serving pairs and the kubelet's) without generating more, and
	// one more key for the CSR approver's identity.
	if len(owners) != 17 {
		t.Errorf("fresh PKI has %d keys, want 17", len(owners))
	}

	got, err := Ensure(cfg, without(full, "scheduler.conf"), time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, sharing(keyOwners(t, merge(full, got)))); diff != "" {
		t.Errorf("scheduler.conf recreated: files sharing a key (-want +got):\n%s", diff)
	}

	for _, tt := range []struct {
		names []string
		want  [][]string
	}{
		{[]string{"scheduler", "scheduler.conf"}, want},
		{[]string{"scheduler.conf"}, [][]string{cm, kubelet}},
	} {
		got, err := Renew(cfg, full, time.Now(), tt.names, true)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.want, sharing(keyOwners(t, merge(full, got)))); diff != "" {
			t.Errorf("renew %q with new keys: files sharing a key (-want +got):\n%s", tt.names, diff)
		}
	}
}

// TestEnsureCertifiesAnInterruptedCAKey covers a first run killed between
// writing the keys and the certificates: the kept CA key gets a certificate.
func TestEnsureCertifiesAnInterruptedCAKey(t *testing.T) {
	cfg := testConfig(t, nil)
	now := time.Now()
	keyOnly, err := Ensure(cfg, Set{}, now, []string{config.CertCA})
	if err != nil {
		t.Fatal(err)
	}
	have := Set{Certs: map[string]KeyPair{config.CertCA: {Key: keyOnly.Certs[config.CertCA].Key}}}
	got, err := Ensure(cfg, have, now, []string{config.CertCA, config.CertAPIServer})
	if err != nil {
		t.Fatal(err)
	}
	ca := got.Certs[config.CertCA]
	if len(ca.Cert) == 0 || ca.Key != nil {
		t.Fatalf("want a new ca.crt and the kept key left alone, got cert %d bytes, key %d bytes", len(ca.Cert), len(ca.Key))
	}
	if err := Check(CertSpecs(cfg)[0], KeyPair{Cert: ca.Cert, Key: have.Certs[config.CertCA].Key}, nil, now, 0); err != nil {
		t.Errorf("the new CA certificate does not match the kept key: %v", err)
	}
	if len(got.Certs[config.CertAPIServer].Cert) == 0 {
		t.Error("apiserver.crt was not issued by the recovered CA")
	}
}
