package pki

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kubeboot/kubeboot/internal/config"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// keyMaterial matches the embedded PEM data of a kubeconfig, which
// changes on every run.
var keyMaterial = regexp.MustCompile(`(certificate-authority-data|client-certificate-data|client-key-data): \S+`)

// TestKubeconfigGolden compares the structure of every kubeconfig, key
// material masked, with testdata/<name>.golden.
func TestKubeconfigGolden(t *testing.T) {
	cfg := testConfig(t, func(c *config.ClusterConfiguration) {
		c.ClusterName = "lab"
		c.ControlPlaneEndpoint = "api.example.com:443"
	})
	set, err := Ensure(cfg, Set{}, time.Now(), append([]string{config.CertCA}, KubeconfigNames(cfg)...))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range KubeconfigSpecs(cfg) {
		t.Run(k.Name, func(t *testing.T) {
			data := set.Kubeconfigs[k.Name]
			if !strings.Contains(string(data), "client-key-data: ") {
				t.Fatalf("%s embeds no client key", k.Name)
			}
			got := keyMaterial.ReplaceAllString(string(data), "$1: MASKED")
			golden := filepath.Join("testdata", k.Name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./pki -update)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("%s differs from %s (-want +got):\n%s", k.Name, golden, diff)
			}
		})
	}
}

func TestCheckKubeconfig(t *testing.T) {
	cfg := testConfig(t, nil)
	specs := KubeconfigSpecs(cfg)
	admin, scheduler := specs[0], specs[4]
	ca, otherCA := mustNewCA(t, CertSpecs(cfg)[0]), mustNewCA(t, CertSpecs(cfg)[0])
	good, err := IssueKubeconfig(admin, ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	signedByOther, err := IssueKubeconfig(admin, otherCA, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := mustIssue(t, admin.Client, ca)
	wrongKey, err := Kubeconfig(admin, ca.Cert, KeyPair{Cert: client.Cert, Key: mustNewKey(t).pem})
	if err != nil {
		t.Fatal(err)
	}
	tokenOnly := clientcmdapi.NewConfig()
	tokenOnly.Clusters["kubernetes"] = &clientcmdapi.Cluster{Server: admin.Server, CertificateAuthorityData: ca.Cert}
	tokenOnly.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: "secret"}
	tokenOnly.Contexts["admin"] = &clientcmdapi.Context{Cluster: "kubernetes", AuthInfo: "admin"}
	tokenOnly.CurrentContext = "admin"
	token, err := clientcmd.Write(*tokenOnly)
	if err != nil {
		t.Fatal(err)
	}
	moved := admin
	moved.Server = "https://api.example.com:6443"
	now := time.Now()
	expiry := mustParseCert(t, client.Cert).NotAfter

	tests := []struct {
		name string
		spec KubeconfigSpec
		data []byte
		now  time.Time
		want *CheckError
	}{
		{name: "reusable", spec: admin, data: good, now: now},
		{name: "moved endpoint", spec: moved, data: good, now: now,
			want: &CheckError{File: "admin.conf", Problems: []string{`server is "https://10.0.0.5:6443", want "https://api.example.com:6443"`}, Renewable: true}},
		{name: "another identity", spec: scheduler, data: good, now: now,
			want: &CheckError{File: "scheduler.conf", Problems: []string{
				`wrong CN "kubernetes-admin", want "system:kube-scheduler"`, `wrong O ["kubeadm:cluster-admins"], want []`}, Renewable: true}},
		{name: "another cluster", spec: admin, data: signedByOther, now: now,
			want: &CheckError{File: "admin.conf", Problems: []string{"does not trust ca.crt", "is not signed by ca.crt"}}},
		{name: "key mismatch", spec: admin, data: wrongKey, now: now,
			want: &CheckError{File: "admin.conf", Problems: []string{"key does not match certificate"}}},
		{name: "expiring", spec: admin, data: good, now: expiry.Add(-24 * time.Hour),
			want: &CheckError{File: "admin.conf", Problems: []string{"expires " + day(expiry) + ", within the renewal window of 720h"}, Renewable: true}},
		{name: "token", spec: admin, data: token, now: now,
			want: &CheckError{File: "admin.conf", Problems: []string{"embeds no client certificate"}}},
		{name: "not a kubeconfig", spec: admin, data: []byte("{"), now: now,
			want: &CheckError{File: "admin.conf", Problems: []string{"cannot parse: "}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got *CheckError
			if err := CheckKubeconfig(tt.spec, tt.data, ca.Cert, nil, tt.now, 720*time.Hour); err != nil {
				if !errors.As(err, &got) {
					t.Fatalf("CheckKubeconfig returned %T %v, want a *CheckError", err, err)
				}
			}
			// client-go's parse errors are compared by their start only.
			if got != nil && len(got.Problems) == 1 && strings.HasPrefix(got.Problems[0], "cannot parse: ") {
				got.Problems[0] = "cannot parse: "
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("CheckKubeconfig (-want +got):\n%s", diff)
			}
		})
	}
}

// TestKubeconfigMemo checks that the memo parses a content once, keeps
// apart two contents, fails as clientcmd.Load fails, and stays bounded.
func TestKubeconfigMemo(t *testing.T) {
	m := &kubeconfigMemo{}
	conf := func(server string) []byte {
		return fmt.Appendf(nil, "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: %s\ncurrent-context: x\n", server)
	}
	a1, err := m.load(conf("https://a:6443"))
	if err != nil {
		t.Fatal(err)
	}
	a2, err := m.load(conf("https://a:6443"))
	if err != nil {
		t.Fatal(err)
	}
	if a1 != a2 {
		t.Error("the same content was parsed twice")
	}
	b, err := m.load(conf("https://b:6443"))
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Clusters["c"].Server; got != "https://b:6443" {
		t.Errorf("the second content's server is %q", got)
	}
	if _, err := m.load([]byte("apiVersion: v1\nkind: Config\nclusters: 3\n")); err == nil {
		t.Error("a kubeconfig clientcmd.Load refuses was accepted")
	}
	for i := range 3 * memoSize {
		if _, err := m.load(conf(fmt.Sprintf("https://%d:6443", i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(m.parsed); n > memoSize {
		t.Errorf("the memo holds %d kubeconfigs, more than %d", n, memoSize)
	}
}
