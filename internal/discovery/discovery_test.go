package discovery

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeboot/kubeboot/internal/bootstraptoken"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/templates"
)

// quick makes the tests' discovery give up within a second.
var quick = Options{Timeout: time.Second, Interval: 20 * time.Millisecond, Answered: 20 * time.Millisecond}

func newCA(t *testing.T) pki.KeyPair {
	t.Helper()
	ca, err := pki.NewCA(pki.CertSpec{Name: "ca", CN: "kubernetes", Usage: pki.UsageCA, Algorithm: config.ECDSAP256, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// pinOf computes a CA's pin without pki.CACertHash: the SHA-256 of the
// SubjectPublicKeyInfo as crypto/x509 reads it from the certificate.
func pinOf(t *testing.T, caPEM []byte) string {
	t.Helper()
	block, _ := pem.Decode(caPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// apiServer serves cluster-info as kube-apiserver does, over TLS with a
// serving certificate for 127.0.0.1 from tlsCA. answer gives the
// ConfigMap's data (nil: 404) for the n-th read, counted from 1.
type apiServer struct {
	srv      *httptest.Server
	endpoint string
	mu       sync.Mutex
	reads    int
	answer   func(n int) map[string]string
	status   int // when set, every read gets it
}

func newAPIServer(t *testing.T, tlsCA pki.KeyPair) *apiServer {
	t.Helper()
	serving, err := pki.Issue(pki.CertSpec{Name: "apiserver", CN: "kube-apiserver", Usage: pki.UsageServer, CA: "ca",
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, Algorithm: config.ECDSAP256, Validity: time.Hour}, tlsCA, nil)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(serving.Cert, serving.Key)
	if err != nil {
		t.Fatal(err)
	}
	a := &apiServer{}
	a.srv = httptest.NewUnstartedServer(http.HandlerFunc(a.serve))
	a.srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	a.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are expected
	a.srv.StartTLS()
	t.Cleanup(a.srv.Close)
	a.endpoint = strings.TrimPrefix(a.srv.URL, "https://")
	return a
}

func (a *apiServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != templates.ClusterInfoPath || r.Method != http.MethodGet || r.Header.Get("Authorization") != "" {
		http.Error(w, "only anonymous GET of cluster-info", http.StatusForbidden)
		return
	}
	a.mu.Lock()
	a.reads++
	n, status := a.reads, a.status
	a.mu.Unlock()
	if status != 0 {
		http.Error(w, "refused", status)
		return
	}
	data := a.answer(n)
	if data == nil {
		http.NotFound(w, r)
		return
	}
	cm := corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-info", Namespace: "kube-public"}, Data: data}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(cm)
}

func (a *apiServer) readCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reads
}

// clusterInfo is cluster-info's data for a cluster at endpoint with ca,
// signed with token unless unsigned.
func clusterInfo(t *testing.T, endpoint string, ca []byte, signed bool) map[string]string {
	t.Helper()
	kubeconfig, err := pki.ClusterInfoKubeconfig("https://"+endpoint, ca)
	if err != nil {
		t.Fatal(err)
	}
	data := map[string]string{"kubeconfig": string(kubeconfig)}
	if signed {
		data["jws-kubeconfig-"+testToken.ID] = SignJWS(kubeconfig, testToken)
	}
	return data
}

// TestByTokenWaitsForTheSignature: cluster-info is unsigned for the first
// two reads, as right after the token was created; discovery waits, then
// checks the signature and the pin, and reads cluster-info again over TLS
// verified with the CA.
func TestByTokenWaitsForTheSignature(t *testing.T) {
	ca := newCA(t)
	a := newAPIServer(t, ca)
	a.answer = func(n int) map[string]string { return clusterInfo(t, a.endpoint, ca.Cert, n > 2) }
	var progress []string
	opts := quick
	// The API server answers, so discovery asks again after Answered: an
	// Interval's pause would outlast the timeout.
	opts.Interval = time.Hour
	opts.Progress = func(msg string) { progress = append(progress, msg) }
	c, err := ByToken(context.Background(), a.endpoint, testToken, []string{"sha256:" + strings.Repeat("0", 64), pinOf(t, ca.Cert)}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if c.Server != "https://"+a.endpoint || !bytes.Equal(c.CA, ca.Cert) || c.CAHash != pinOf(t, ca.Cert) || c.Token != testToken || c.Name != "kubernetes" {
		t.Errorf("discovered %+v", c)
	}
	// Two unsigned reads, then the signed one and the verified one.
	if got := a.readCount(); got != 4 {
		t.Errorf("%d reads of cluster-info, want 4", got)
	}
	if len(progress) != 1 || progress[0] != "waiting: cluster-info holds no signature jws-kubeconfig-abcdef" {
		t.Errorf("progress %q", progress)
	}
}

func TestByTokenRefuses(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	zeros := "sha256:" + strings.Repeat("0", 64)
	tests := []struct {
		name string
		// tlsCA issues the server's certificate; answer is what it serves.
		tlsCA  pki.KeyPair
		answer func(a *apiServer, n int) map[string]string
		status int
		pin    string
		want   string
		reads  int // 0: any number (a retry until the timeout)
	}{
		{"a wrong CA pin", ca, func(a *apiServer, _ int) map[string]string { return clusterInfo(t, a.endpoint, ca.Cert, true) }, 0, zeros,
			"the cluster's CA has hash " + pinOf(t, ca.Cert) + ", not the pinned " + zeros + ": check --discovery-token-ca-cert-hash", 1},
		{"the wrong token secret", ca, func(a *apiServer, _ int) map[string]string {
			data := clusterInfo(t, a.endpoint, ca.Cert, false)
			data["jws-kubeconfig-abcdef"] = SignJWS([]byte(data["kubeconfig"]), bootstraptoken.Token{ID: "abcdef", Secret: "ffffffffffffffff"})
			return data
		}, 0, pinOf(t, ca.Cert), "the token's secret is wrong (check --token)", 1},
		{"a tampered kubeconfig", ca, func(a *apiServer, _ int) map[string]string {
			data := clusterInfo(t, a.endpoint, ca.Cert, true)
			data["kubeconfig"] = strings.Replace(data["kubeconfig"], "127.0.0.1", "127.0.0.2", 1)
			return data
		}, 0, pinOf(t, ca.Cert), "verify the signature jws-kubeconfig-abcdef of cluster-info: the signature does not match", 1},
		// Someone in the middle relays the real, signed cluster-info, but
		// cannot present a certificate of the real CA on the verified read.
		{"a server without the cluster CA's certificate", other, func(a *apiServer, _ int) map[string]string { return clusterInfo(t, a.endpoint, ca.Cert, true) }, 0, pinOf(t, ca.Cert),
			"over TLS verified with the cluster CA: tls: failed to verify certificate: x509: certificate signed by unknown authority", 1},
		{"an answer that changes on the verified read", ca, func(a *apiServer, n int) map[string]string {
			data := clusterInfo(t, a.endpoint, ca.Cert, true)
			if n == 2 {
				data["kubeconfig"] += "# changed\n"
			}
			return data
		}, 0, pinOf(t, ca.Cert), "its kubeconfig differs from the first read", 2},
		{"a token that signs nothing", ca, func(a *apiServer, _ int) map[string]string { return clusterInfo(t, a.endpoint, ca.Cert, false) }, 0, pinOf(t, ca.Cert),
			"cluster-info holds no signature jws-kubeconfig-abcdef (gave up after 1s, timeouts.discovery): the token abcdef is unknown, expired or deleted: create one with `kubeboot token create` on a control-plane node", 0},
		{"no cluster-info", ca, func(*apiServer, int) map[string]string { return nil }, 0, pinOf(t, ca.Cert), "run `kubeboot init phase cluster-info`", 0},
		{"anonymous access refused", ca, nil, http.StatusForbidden, pinOf(t, ca.Cert), "refuses anonymous GET of cluster-info (HTTP 403)", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAPIServer(t, tt.tlsCA)
			a.status = tt.status
			a.answer = func(n int) map[string]string { return tt.answer(a, n) }
			_, err := ByToken(context.Background(), a.endpoint, testToken, []string{tt.pin}, quick)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), testToken.Secret) {
				t.Errorf("the error holds the token's secret: %v", err)
			}
			if tt.reads != 0 && a.readCount() != tt.reads {
				t.Errorf("%d reads, want %d: a definite failure must not be retried", a.readCount(), tt.reads)
			}
		})
	}
}

// TestByTokenPacing: discovery asks again after Interval while nothing
// answers (a server that accepts the connection and closes it), and after
// Answered once the API server answers without a cluster-info to read.
func TestByTokenPacing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = l.Close() })
	opts := Options{Timeout: time.Second, Interval: 400 * time.Millisecond, Answered: time.Hour}
	if _, err := ByToken(context.Background(), l.Addr().String(), testToken, []string{"sha256:" + strings.Repeat("0", 64)}, opts); err == nil {
		t.Fatal("discovered through a server that closes every connection")
	}
	// At 0, 0.4 and 0.8 s; Answered's pause would leave one.
	if n := accepted.Load(); n < 2 || n > 3 {
		t.Errorf("%d attempts within 1 s, 400 ms apart; want 3", n)
	}

	a := newAPIServer(t, newCA(t))
	a.answer = func(int) map[string]string { return nil } // 404
	opts = Options{Timeout: time.Second, Interval: time.Hour, Answered: 100 * time.Millisecond}
	if _, err := ByToken(context.Background(), a.endpoint, testToken, []string{"sha256:" + strings.Repeat("0", 64)}, opts); err == nil || !strings.Contains(err.Error(), "HTTP 404") {
		t.Fatalf("got %v, want the 404 the API server answered", err)
	}
	// About 10; Interval's pause would leave one.
	if n := a.readCount(); n < 3 || n > 11 {
		t.Errorf("%d reads of cluster-info within 1 s, 100 ms apart; want about 10", n)
	}
}

func TestByTokenUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := l.Addr().String()
	_ = l.Close() // nothing listens there now
	_, err = ByToken(context.Background(), endpoint, testToken, []string{"sha256:" + strings.Repeat("0", 64)}, quick)
	if err == nil || !strings.Contains(err.Error(), `reach the API server at "`+endpoint+`"`) || !strings.Contains(err.Error(), "connection refused") ||
		!strings.Contains(err.Error(), "check the endpoint") {
		t.Fatalf("got %v", err)
	}
}

// TestCAPinOfAnOpenSSLCA checks the pin against one computed by another
// tool: testdata/openssl-ca.crt was made by openssl, and its pin with
// `openssl x509 -pubkey -noout | openssl pkey -pubin -outform der |
// openssl dgst -sha256`, the command kubeadm's documentation gives.
func TestCAPinOfAnOpenSSLCA(t *testing.T) {
	ca, err := os.ReadFile("testdata/openssl-ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := pki.ClusterInfoKubeconfig("https://10.0.0.10:6443", ca)
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseClusterInfo(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if want := "sha256:fbc3df3e8c0de084d015658c5f70833f5d6563be1a7bf314ee008db5c7ae60a3"; c.CAHash != want {
		t.Errorf("pin %s, want openssl's %s", c.CAHash, want)
	}
}
