package health

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	file   string // the CA certificate's PEM file
	serial int64
}

// newCA creates a CA named name and writes its certificate to dir.
func newCA(t testing.TB, dir, name string) *testCA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{cert: cert, key: key, file: filepath.Join(dir, name+".crt"), serial: 1}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// pair is an issued certificate: loaded for servers, and as files for
// probes.
type pair struct {
	tls      tls.Certificate
	certFile string
	keyFile  string
}

// issue signs a leaf certificate for cn with the given IP SANs (a server
// certificate when it has SANs, else a client certificate) and writes it
// and its key to dir.
func (ca *testCA) issue(t testing.TB, dir, cn string, ips ...string) pair {
	t.Helper()
	key := newKey(t)
	ca.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(ips) > 0 {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		for _, ip := range ips {
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := pair{certFile: filepath.Join(dir, cn+".crt"), keyFile: filepath.Join(dir, cn+".key")}
	writePEM(t, p.certFile, "CERTIFICATE", der)
	writePEM(t, p.keyFile, "EC PRIVATE KEY", keyDER)
	p.tls, err = tls.LoadX509KeyPair(p.certFile, p.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// pool is a CertPool with only this CA.
func (ca *testCA) pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return pool
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// pki is the test's cluster CA with a server certificate for 127.0.0.1
// and a client certificate, and a second, unrelated CA.
type testPKI struct {
	dir    string
	ca     *testCA
	server pair
	client pair
	other  *testCA
}

func newPKI(t testing.TB) *testPKI {
	t.Helper()
	dir := t.TempDir()
	p := &testPKI{dir: dir, ca: newCA(t, dir, "cluster-ca"), other: newCA(t, dir, "other-ca")}
	p.server = p.ca.issue(t, dir, "server", "127.0.0.1")
	p.client = p.ca.issue(t, dir, "client")
	return p
}

// serveTLS starts an HTTPS test server with the given serving certificate
// that requires client certificates of clientCA (nil: none asked for).
func serveTLS(t testing.TB, h http.Handler, server tls.Certificate, clientCA *testCA) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{server}}
	if clientCA != nil {
		srv.TLS.ClientCAs = clientCA.pool()
		srv.TLS.ClientAuth = tls.RequireAndVerifyClientCert
	}
	// Rejected handshakes are the point of some tests; keep them quiet.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// closedURL returns an https URL of a local port where nothing listens.
func closedURL(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return "https://" + addr
}

// healthz answers 200 ok on every path.
var healthz = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
