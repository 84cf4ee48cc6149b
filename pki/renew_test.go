package pki

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kubeboot/kubeboot/internal/config"
)

func TestRenew(t *testing.T) {
	cfg := testConfig(t, nil)
	full := ensureAll(t, cfg)
	var allLeaves []string
	for _, s := range CertSpecs(cfg) {
		if s.Usage != UsageCA {
			allLeaves = append(allLeaves, s.Name+".crt")
		}
	}
	tests := []struct {
		name    string
		have    Set
		names   []string
		newKeys bool
		want    []string
	}{
		{name: "one certificate, same key", have: full, names: []string{"apiserver"}, want: []string{"apiserver.crt"}},
		{name: "one certificate, new key", have: full, names: []string{"apiserver"}, newKeys: true, want: []string{"apiserver.crt", "apiserver.key"}},
		{name: "kubeconfig", have: full, names: []string{"admin.conf", "etcd/server"}, want: []string{"admin.conf", "etcd/server.crt"}},
		{name: "all", have: full, want: append(allLeaves, KubeconfigNames(cfg)...)},
		{name: "all skips an external CA", have: without(full, "front-proxy-ca.key"),
			want: append(without1(allLeaves, "front-proxy-client.crt"), KubeconfigNames(cfg)...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Renew(cfg, tt.have, time.Now(), tt.names, tt.newKeys)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(sorted(tt.want), written(got)); diff != "" {
				t.Errorf("written files (-want +got):\n%s", diff)
			}
			after := merge(tt.have, got)
			verifyConverged(t, cfg, after)
			for name, pair := range got.Certs {
				if string(pair.Cert) == string(full.Certs[name].Cert) {
					t.Errorf("%s.crt was not renewed", name)
				}
				oldKey := mustParseCert(t, full.Certs[name].Cert).PublicKey
				if kept := publicKeysEqual(mustParseCert(t, pair.Cert).PublicKey, oldKey); kept == tt.newKeys {
					t.Errorf("%s: kept key = %v, want %v", name, kept, !tt.newKeys)
				}
			}
			for name, data := range got.Kubeconfigs {
				if string(data) == string(full.Kubeconfigs[name]) {
					t.Errorf("%s was not renewed", name)
				}
			}
		})
	}
}

func without1(list []string, drop string) []string {
	var out []string
	for _, s := range list {
		if s != drop {
			out = append(out, s)
		}
	}
	return out
}

// TestRenewFixes renews a certificate that a configuration change made
// unusable.
func TestRenewFixes(t *testing.T) {
	cfg := testConfig(t, nil)
	full := ensureAll(t, cfg)
	cfg.APIServer.CertSANs = []string{"api.example.com"}
	spec := CertSpecs(cfg)[1]
	if err := Check(spec, full.Certs[spec.Name], full.Certs[spec.CA].Cert, time.Now(), 0); err == nil {
		t.Fatal("Check accepts a certificate without the new SAN")
	}
	got, err := Renew(cfg, full, time.Now(), []string{spec.Name}, false)
	if err != nil {
		t.Fatal(err)
	}
	verifyConverged(t, cfg, merge(full, got))
	if diff := cmp.Diff([]string{"kube-apiserver"}, Restarts(cfg, []string{spec.Name})); diff != "" {
		t.Errorf("Restarts (-want +got):\n%s", diff)
	}
}

func TestRenewErrors(t *testing.T) {
	cfg := testConfig(t, nil)
	full := ensureAll(t, cfg)
	tests := []struct {
		name  string
		have  Set
		names []string
		want  string
	}{
		{"a CA", full, []string{"etcd/ca"}, `renew "etcd/ca": kubeboot does not renew CAs`},
		{"the service-account key", full, []string{"sa"}, `renew "sa": the service-account key is not a certificate`},
		{"unknown", full, []string{"apiserver.crt"}, `find "apiserver.crt": not a certificate or kubeconfig of this node`},
		{"external CA", without(full, "ca.key"), []string{"kubelet.conf"}, `issue certificate "kubelet.conf": ca.key is absent (external CA)`},
		{"no CA", without(full, "ca.key", "ca.crt"), []string{"scheduler"}, `find CA "ca": ca.crt is missing`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Renew(cfg, tt.have, time.Now(), tt.names, false)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("Renew = %v, %v; want error %q", written(got), err, tt.want)
			}
		})
	}
}

func TestExpirations(t *testing.T) {
	cfg := testConfig(t, nil)
	full := ensureAll(t, cfg)
	have := without(full, "front-proxy-ca.key", "scheduler.crt", "admin.conf")
	have.Kubeconfigs[config.KubeconfigSuperAdmin] = []byte("not a kubeconfig")
	now := time.Now().Add(100 * 24 * time.Hour)

	type entry struct {
		Name, CA          string
		Days              int
		External, Missing bool
		Err               string
	}
	var got []entry
	for _, e := range Expirations(cfg, have, now) {
		g := entry{Name: e.Name, CA: e.CA, Days: int(e.Residual.Round(24*time.Hour) / (24 * time.Hour)), External: e.External, Missing: e.Missing}
		if e.Err != nil {
			g.Err = e.Err.Error()
		}
		if !e.NotAfter.IsZero() && !e.NotAfter.Equal(now.Add(e.Residual)) {
			t.Errorf("%s: NotAfter %v and residual %v disagree", e.Name, e.NotAfter, e.Residual)
		}
		got = append(got, g)
	}
	ca, leaf := 3650-100, 365-100
	want := []entry{
		{Name: "ca", Days: ca},
		{Name: "apiserver", CA: "ca", Days: leaf},
		{Name: "apiserver-kubelet-client", CA: "ca", Days: leaf},
		{Name: "front-proxy-ca", Days: ca, External: true},
		{Name: "front-proxy-client", CA: "front-proxy-ca", Days: leaf, External: true},
		{Name: "etcd/ca", Days: ca},
		{Name: "etcd/server", CA: "etcd/ca", Days: leaf},
		{Name: "etcd/peer", CA: "etcd/ca", Days: leaf},
		{Name: "etcd/healthcheck-client", CA: "etcd/ca", Days: leaf},
		{Name: "apiserver-etcd-client", CA: "etcd/ca", Days: leaf},
		{Name: "controller-manager", CA: "ca", Days: leaf},
		{Name: "scheduler", CA: "ca", Missing: true},
		{Name: "kubelet-server", CA: "ca", Days: leaf},
		{Name: "admin.conf", CA: "ca", Missing: true},
		{Name: "super-admin.conf", CA: "ca", Err: `read kubeconfig "super-admin.conf": cannot parse: `},
		{Name: "kubelet.conf", CA: "ca", Days: leaf},
		{Name: "controller-manager.conf", CA: "ca", Days: leaf},
		{Name: "scheduler.conf", CA: "ca", Days: leaf},
		{Name: "csr-approver.conf", CA: "ca", Days: leaf},
	}
	// An error from client-go is compared by its start only.
	prefix := cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Err" },
		cmp.Comparer(func(a, b string) bool {
			return a == b || a != "" && b != "" && (strings.HasPrefix(a, b) || strings.HasPrefix(b, a))
		}))
	if diff := cmp.Diff(want, got, prefix); diff != "" {
		t.Errorf("Expirations (-want +got):\n%s", diff)
	}
}

func TestExpiringCAs(t *testing.T) {
	cfg := testConfig(t, nil)
	full := ensureAll(t, cfg)
	tests := []struct {
		name  string
		have  Set
		after time.Duration
		want  []string
	}{
		{name: "far from expiry", have: full, after: 100 * 24 * time.Hour},
		{name: "just outside the window", have: full, after: (3650 - 31) * 24 * time.Hour},
		{name: "within the window", have: full, after: (3650 - 29) * 24 * time.Hour, want: []string{"ca", "front-proxy-ca", "etcd/ca"}},
		{name: "a missing CA is not expiring", have: without(full, "etcd/ca.crt"), after: (3650 - 29) * 24 * time.Hour, want: []string{"ca", "front-proxy-ca"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, e := range ExpiringCAs(cfg, tt.have, time.Now().Add(tt.after)) {
				got = append(got, e.Name)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ExpiringCAs (-want +got):\n%s", diff)
			}
		})
	}
}
