//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// secCheckEncryption writes a Secret through the API and reads its raw
// etcd value with the health-check client certificate: it must carry the
// envelope of the secretbox provider, not the plaintext.
func secCheckEncryption(t *testing.T, l *node) {
	const marker = "sec-plaintext-marker"
	if _, err := secKubectl(l, "create", "secret", "generic", "sec-probe", "-n", "default", "--from-literal=value="+marker); err != nil {
		t.Fatal(err)
	}
	raw, err := secRun("nsenter", "--net="+l.netns, "--", filepath.Join(binDir, "etcdctl"),
		"--endpoints=https://"+net.JoinHostPort(l.addr, "2379"),
		"--cacert="+l.path("pki/etcd/ca.crt"),
		"--cert="+l.path("pki/etcd/healthcheck-client.crt"),
		"--key="+l.path("pki/etcd/healthcheck-client.key"),
		"get", "/registry/secrets/default/sec-probe", "--print-value-only")
	if err != nil {
		t.Fatal(err)
	}
	const envelope = "k8s:enc:secretbox:v1:key1:"
	if !strings.HasPrefix(raw, envelope) {
		t.Errorf("the stored Secret does not start with %q: %q", envelope, raw[:min(40, len(raw))])
	}
	if strings.Contains(raw, marker) {
		t.Error("the Secret's value is stored in plaintext")
	}
	t.Logf("etcd holds /registry/secrets/default/sec-probe as %q... (%d bytes)", raw[:min(len(envelope), len(raw))], len(raw))
}

// secAuditEvent is the part of an audit.k8s.io/v1 Event the test reads.
type secAuditEvent struct {
	Level      string          `json:"level"`
	Verb       string          `json:"verb"`
	RequestURI string          `json:"requestURI"`
	Request    json.RawMessage `json:"requestObject"`
	ObjectRef  struct {
		Resource, Namespace, Name string
	} `json:"objectRef"`
}

// secCheckAudit creates a ConfigMap and finds its audit event: logged at
// Metadata level, without the body, by the policy's rule for ConfigMaps.
// No health check may appear in the log.
func secCheckAudit(t *testing.T, l *node) {
	if _, err := secKubectl(l, "create", "configmap", "sec-audit-probe", "-n", "default", "--from-literal=k=v"); err != nil {
		t.Fatal(err)
	}
	path := l.path("audit/audit.log")
	var found *secAuditEvent
	err := secPoll(30*time.Second, func() error {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		scanner := bufio.NewScanner(bytes.NewReader(data))
		scanner.Buffer(make([]byte, 1<<20), 1<<24)
		for scanner.Scan() {
			var e secAuditEvent
			if json.Unmarshal(scanner.Bytes(), &e) != nil {
				continue
			}
			if strings.HasPrefix(e.RequestURI, "/livez") || strings.HasPrefix(e.RequestURI, "/readyz") || strings.HasPrefix(e.RequestURI, "/healthz") {
				return fmt.Errorf("health check %s logged, which the policy excludes", e.RequestURI)
			}
			if e.Verb == "create" && e.ObjectRef.Resource == "configmaps" && e.ObjectRef.Name == "sec-audit-probe" {
				found = &e
			}
		}
		if found == nil {
			return fmt.Errorf("no create event for configmap sec-audit-probe in %s", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found.Level != "Metadata" || len(found.Request) != 0 {
		t.Errorf("ConfigMap create logged at %s with a body of %d bytes, want Metadata without it", found.Level, len(found.Request))
	}
	t.Logf("audit event: %s %s %s/%s at level %s", found.Verb, found.ObjectRef.Resource, found.ObjectRef.Namespace, found.ObjectRef.Name, found.Level)
}

// secEndpoint is a TLS server of the lab.
type secEndpoint struct {
	name, addr string
	ca         string
	clientCert string // base path of a client certificate the server requires
}

// secCBCSuites are the CBC suites Go can offer, for both key types.
var secCBCSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
	tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA,
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256,
}

// secCheckTLS hands every serving port a TLS 1.1 client and a CBC-only
// client, which the server must refuse with an alert, and a TLS 1.2 client
// that verifies the server against its CA, which must get through: the
// refusals then come from the server's settings, not from a dead port.
func secCheckTLS(t *testing.T, l *node) {
	endpoints := []secEndpoint{
		{"kube-apiserver", net.JoinHostPort(l.addr, "6443"), "pki/ca.crt", ""},
		{"kube-controller-manager", "127.0.0.1:10257", "pki/ca.crt", ""},
		{"kube-scheduler", "127.0.0.1:10259", "pki/ca.crt", ""},
		{"etcd", net.JoinHostPort(l.addr, "2379"), "pki/etcd/ca.crt", "pki/etcd/healthcheck-client"},
		{"kubelet", net.JoinHostPort(l.addr, "10250"), "pki/ca.crt", ""},
	}
	for _, ep := range endpoints {
		pool := x509.NewCertPool()
		caPEM, err := os.ReadFile(l.path(ep.ca))
		if err != nil || !pool.AppendCertsFromPEM(caPEM) {
			t.Fatalf("read %s: %v", ep.ca, err)
		}
		good := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS12}
		if ep.clientCert != "" {
			pair, err := tls.LoadX509KeyPair(l.path(ep.clientCert+".crt"), l.path(ep.clientCert+".key"))
			if err != nil {
				t.Fatal(err)
			}
			good.Certificates = []tls.Certificate{pair}
		}
		if err := secHandshake(l, ep.addr, good); err != nil {
			t.Errorf("%s %s: a verified TLS 1.2 handshake failed: %v", ep.name, ep.addr, err)
			continue
		}
		// The refused handshakes need no verification: the server must
		// refuse in its first answer, before any certificate is sent.
		old := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}
		cbc := &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12, CipherSuites: secCBCSuites}
		for name, cfg := range map[string]*tls.Config{"TLS 1.1": old, "CBC suites": cbc} {
			err := secHandshake(l, ep.addr, cfg)
			if err == nil || !strings.Contains(err.Error(), "remote error") {
				t.Errorf("%s %s: a %s handshake was not refused by the server: %v", ep.name, ep.addr, name, err)
				continue
			}
			t.Logf("%s %s: %s refused: %v", ep.name, ep.addr, name, err)
		}
	}
}

// secHandshake makes a TLS handshake with addr from the node's network.
func secHandshake(l *node, addr string, cfg *tls.Config) error {
	raw, err := l.dial("tcp", addr)
	if err != nil {
		return err
	}
	if !cfg.InsecureSkipVerify {
		// What tls.Dial takes from the address.
		cfg = cfg.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	conn := tls.Client(raw, cfg)
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	err = conn.Handshake()
	_ = conn.Close()
	return err
}

// secCheckAnonymous: without credentials /readyz answers and the API does not.
func secCheckAnonymous(t *testing.T, l *node) {
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(l.path("pki/ca.crt"))
	if err != nil || !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("read ca.crt: %v", err)
	}
	client := l.httpClient(&tls.Config{RootCAs: pool})
	base := l.apiURL("")
	for path, want := range map[string]int{"/readyz": http.StatusOK, "/livez": http.StatusOK, "/api/v1/namespaces": http.StatusUnauthorized, "/version": http.StatusUnauthorized} {
		resp, err := client.Get(base + path)
		if err != nil {
			t.Errorf("GET %s: %v", path, err)
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("anonymous GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
}

// secCheckKubeletPath asks the API server for a pod's log: it reaches the
// kubelet at the node's address over TLS verified with
// --kubelet-certificate-authority.
func secCheckKubeletPath(t *testing.T, l *node) {
	pod := "etcd-" + l.name
	var out string
	err := secPoll(90*time.Second, func() error {
		var err error
		out, err = secKubectl(l, "logs", "-n", "kube-system", pod, "--tail=1")
		return err
	})
	if err != nil {
		t.Fatalf("kubectl logs through the API server: %v", err)
	}
	t.Logf("kubectl logs %s: %s", pod, strings.TrimSpace(out)[:min(100, len(strings.TrimSpace(out)))])
}

// secCheckFiles checks the modes and owners CIS section 1.1 asks for.
func secCheckFiles(t *testing.T, l *node, etcdUID int) {
	want := []struct {
		path string
		mode fs.FileMode
		uid  int
	}{
		{"etcd", fs.ModeDir | 0o700, etcdUID},
		{"pki/encryption-config.yaml", 0o600, 0},
		{"apiserver/audit-policy.yaml", 0o600, 0},
		{"audit", fs.ModeDir | 0o700, 0},
		{"manifests/kube-apiserver.yaml", 0o600, 0},
		{"admin.conf", 0o600, 0},
		{"pki/kubelet-server.key", 0o600, 0},
		{"pki/kubelet-server.crt", 0o644, 0},
	}
	for _, w := range want {
		info, err := os.Stat(l.path(w.path))
		if err != nil {
			t.Error(err)
			continue
		}
		uid := int(info.Sys().(*syscall.Stat_t).Uid)
		if info.Mode() != w.mode || uid != w.uid {
			t.Errorf("%s: %v owned by %d, want %v owned by %d", w.path, info.Mode(), uid, w.mode, w.uid)
		}
	}
}
