package discovery

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/pki"
)

func writeFile(t *testing.T, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "discovery.conf")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFromFile reads the file `kubeboot token create --discovery-file`
// writes, and checks it against the API server it names.
func TestFromFile(t *testing.T) {
	ca := newCA(t)
	a := newAPIServer(t, ca)
	a.answer = func(int) map[string]string { return clusterInfo(t, a.endpoint, ca.Cert, false) }
	file, err := pki.DiscoveryKubeconfig("lab", "https://"+a.endpoint, ca.Cert, testToken.Value())
	if err != nil {
		t.Fatal(err)
	}
	c, err := FromFile(context.Background(), writeFile(t, file), quick)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "lab" || c.Server != "https://"+a.endpoint || !bytes.Equal(c.CA, ca.Cert) || c.CAHash != pinOf(t, ca.Cert) || c.Token != testToken {
		t.Errorf("discovered %+v", c)
	}
	if a.readCount() != 1 {
		t.Errorf("%d reads of cluster-info, want 1", a.readCount())
	}

	// Without a user, there is no token: the caller needs --token.
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["lab"] = &clientcmdapi.Cluster{Server: "https://" + a.endpoint, CertificateAuthorityData: ca.Cert}
	cfg.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab"}
	cfg.CurrentContext = "lab"
	noUser, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := FromFile(context.Background(), writeFile(t, noUser), quick); err != nil || c.Token != (bootstraptoken.Token{}) {
		t.Errorf("a file without a user: %+v, %v", c, err)
	}
}

func TestFromFileRefuses(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	a := newAPIServer(t, ca)
	a.answer = func(int) map[string]string { return clusterInfo(t, a.endpoint, ca.Cert, false) }
	file := func(caCert []byte, token string) []byte {
		data, err := pki.DiscoveryKubeconfig("lab", "https://"+a.endpoint, caCert, token)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	const notAToken = "a-long-bearer-token-that-is-no-bootstrap-token"
	tests := []struct {
		name string
		path string
		want string
		// code is the exit code: a malformed file is a usage error, a
		// cluster that does not answer as the file says is not.
		code int
	}{
		{"another cluster's CA", writeFile(t, file(other.Cert, testToken.Value())), "tls: failed to verify certificate: x509: certificate signed by unknown authority", exit.Failure},
		{"a token that is no bootstrap token", writeFile(t, file(ca.Cert, notAToken)), `(users["tls-bootstrap-token-user"].user.token)`, exit.Usage},
		{"no CA", writeFile(t, bytes.Replace(file(ca.Cert, testToken.Value()), []byte("certificate-authority-data"), []byte("certificate-authority"), 1)), "embeds none (certificate-authority-data)", exit.Usage},
		{"an http server", writeFile(t, bytes.Replace(file(ca.Cert, testToken.Value()), []byte("https://"), []byte("http://"), 1)), "want an https:// URL", exit.Usage},
		{"a CA that is no certificate", writeFile(t, file([]byte("not a certificate"), testToken.Value())), "certificate-authority-data", exit.Usage},
		{"no current context", writeFile(t, bytes.Replace(file(ca.Cert, testToken.Value()), []byte("current-context: "), []byte("current-context: other-"), 1)), `current-context: "other-`, exit.Usage},
		{"not a kubeconfig", writeFile(t, []byte("- a list\n")), "not a kubeconfig", exit.Usage},
		{"a directory", t.TempDir(), "not a regular file: it is a directory", exit.Usage},
		{"no file", filepath.Join(t.TempDir(), "missing.conf"), "no such file or directory", exit.Usage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromFile(context.Background(), tt.path, quick)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
			if got := exit.Code(err); got != tt.code {
				t.Errorf("exit code %d, want %d: %v", got, tt.code, err)
			}
			if tt.code == exit.Usage && !strings.Contains(err.Error(), "kubeboot token create --discovery-file") {
				t.Errorf("the error does not say how to fix the file: %v", err)
			}
			if strings.Contains(err.Error(), notAToken) || strings.Contains(err.Error(), testToken.Secret) {
				t.Errorf("the error quotes the token: %v", err)
			}
		})
	}
}
