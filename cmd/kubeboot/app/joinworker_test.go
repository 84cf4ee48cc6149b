package app

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/templates"
)

const (
	joinToken  = "abcdef.0123456789abcdef"
	joinSecret = "0123456789abcdef"
)

// joinCluster is an API server for a worker's join: over TLS with a
// certificate of its CA for 127.0.0.1, it serves cluster-info signed with
// joinToken to anyone, and to joinToken, its Node (NotFound) and
// kube-system/kubelet-config.
type joinCluster struct {
	endpoint string
	ca       []byte
	pin      string
}

func newJoinCluster(t *testing.T) joinCluster {
	t.Helper()
	ca, err := pki.NewCA(pki.CertSpec{Name: "ca", CN: "kubernetes", Usage: pki.UsageCA, Algorithm: config.ECDSAP256, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	serving, err := pki.Issue(pki.CertSpec{Name: "apiserver", CN: "kube-apiserver", Usage: pki.UsageServer, CA: "ca",
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, Algorithm: config.ECDSAP256, Validity: time.Hour}, ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(serving.Cert, serving.Key)
	if err != nil {
		t.Fatal(err)
	}
	c := joinCluster{ca: ca.Cert}
	if c.pin, err = pki.CACertHash(ca.Cert); err != nil {
		t.Fatal(err)
	}
	init := config.New()
	config.SetDefaults(init, config.Host{Name: "node1", Address: "10.0.0.10"})
	kubelet, err := phases.ClusterKubeletConfiguration(init)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var obj any
		switch {
		case r.URL.Path == templates.ClusterInfoPath:
			kubeconfig, err := pki.ClusterInfoKubeconfig(srv.URL, ca.Cert)
			if err != nil {
				t.Error(err)
			}
			obj = configMap("kube-public", "cluster-info", map[string]string{"kubeconfig": string(kubeconfig), "jws-kubeconfig-abcdef": jwsSign(string(kubeconfig))})
		case r.Header.Get("Authorization") != "Bearer "+joinToken:
			obj = apierrors.NewUnauthorized("not the token").ErrStatus
		case r.URL.Path == "/api/v1/nodes/worker1":
			obj = apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, "worker1").ErrStatus
		case r.URL.Path == "/api/v1/namespaces/kube-system/configmaps/kubelet-config":
			obj = configMap("kube-system", "kubelet-config", map[string]string{"kubelet": string(kubelet)})
		default:
			obj = apierrors.NewForbidden(schema.GroupResource{}, r.URL.Path, nil).ErrStatus
		}
		if status, ok := obj.(metav1.Status); ok {
			status.APIVersion, status.Kind = "v1", "Status"
			obj, w = status, statusWriter{w, int(status.Code)}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(obj)
	})
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c.endpoint = strings.TrimPrefix(srv.URL, "https://")
	return c
}

// statusWriter writes a Status with its code.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s statusWriter) Write(data []byte) (int, error) {
	s.WriteHeader(s.code)
	return s.ResponseWriter.Write(data)
}

func configMap(namespace, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Data: data}
}

// jwsSign signs payload with joinToken as the bootstrapsigner does.
func jwsSign(payload string) string {
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","kid":"abcdef"}`))
	mac := hmac.New(sha256.New, []byte(joinSecret))
	mac.Write([]byte(header + "." + base64.RawURLEncoding.EncodeToString([]byte(payload))))
	return header + ".." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// workerConfig is a WorkerConfiguration with every path under dir/node and
// a free kubelet port.
func workerConfig(t *testing.T, dir string) (path, node string) {
	t.Helper()
	node = filepath.Join(dir, "node")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	_ = l.Close()
	return writeFile(t, dir, "worker.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: WorkerConfiguration\n"+
		"certificates: {dir: "+node+"/pki}\npaths: {manifestsDir: "+node+"/manifests, kubeconfigDir: "+node+"}\n"+
		"kubelet: {configFile: "+node+"/kubelet/config.yaml, extraConfig: {address: 127.0.0.1, port: "+port+"}}\n"), node
}

// TestJoinWorker runs the join command `kubeboot token create
// --print-join-command` prints, up to the kubelet's start, against an API
// server, in both output formats: it writes what the kubelet needs, and
// the token is in no output.
func TestJoinWorker(t *testing.T) {
	c := newJoinCluster(t)
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			cfg, node := workerConfig(t, t.TempDir())
			code, stdout, stderr := runCLI(t, "join", c.endpoint, "--token", joinToken, "--discovery-token-ca-cert-hash", c.pin,
				"--config", cfg, "--node-name", "worker1",
				// This host's own checks are phases' hostchecks_test.go's.
				"--ignore-preflight-errors", hostChecks,
				"--skip-phases", "kubelet-start,kubelet-wait-bootstrap", "-o", format)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			if strings.Contains(stdout+stderr, joinSecret) {
				t.Errorf("the output holds the token's secret:\n%s%s", stdout, stderr)
			}
			progress := stderr
			if format == "json" {
				progress = stdout
				lines := strings.Split(strings.TrimSpace(stdout), "\n")
				var last struct{ Result workflow.Result }
				if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff([]string{"preflight", "kubelet-config", "bootstrap-kubeconfig"}, last.Result.Phases); diff != "" || !last.Result.OK {
					t.Errorf("result %+v (phases -want +got):\n%s", last.Result, diff)
				}
			} else if stdout != "" {
				t.Errorf("a text run printed to stdout: %q", stdout)
			}
			if !strings.Contains(progress, "discovered the cluster at https://"+c.endpoint+" through token abcdef; its CA has hash "+c.pin) {
				t.Errorf("progress:\n%s", progress)
			}
			bootstrap, err := os.ReadFile(filepath.Join(node, "bootstrap-kubelet.conf"))
			if err != nil || !strings.Contains(string(bootstrap), "token: "+joinToken) {
				t.Errorf("bootstrap-kubelet.conf: %v\n%s", err, bootstrap)
			}
			var kc map[string]any
			data, err := os.ReadFile(filepath.Join(node, "kubelet", "config.yaml"))
			if err != nil || yaml.Unmarshal(data, &kc) != nil || kc["staticPodPath"] != node+"/manifests" || kc["serverTLSBootstrap"] != true {
				t.Errorf("kubelet config: %v\n%s", err, data)
			}
		})
	}
}

func TestJoinWorkerRefuses(t *testing.T) {
	c := newJoinCluster(t)
	dir := t.TempDir()
	cfg, node := workerConfig(t, dir)
	zeros := "sha256:" + strings.Repeat("0", 64)
	badToken := "abcdef.0123456789abcdeX"
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no discovery", []string{"join", "--config", cfg}, 2, "discovery: Required value: pass ENDPOINT --token T --discovery-token-ca-cert-hash sha256:H"},
		{"no pin", []string{"join", c.endpoint, "--token", joinToken, "--config", cfg}, 2, "discovery.caCertHashes: Required value"},
		{"a malformed token", []string{"join", c.endpoint, "--token", badToken, "--discovery-token-ca-cert-hash", c.pin, "--config", cfg}, 2, "discovery.token: Invalid value: not a bootstrap token (--token)"},
		{"the wrong pin", []string{"join", c.endpoint, "--token", joinToken, "--discovery-token-ca-cert-hash", zeros, "--config", cfg},
			1, "the cluster's CA has hash " + c.pin + ", not the pinned " + zeros + ": check --discovery-token-ca-cert-hash"},
		{"a bundle without --control-plane", []string{"join", c.endpoint, "--certs-bundle", "b", "--key-file", "k"}, 2, "--certs-bundle, --key-file and --certificate-key join a control-plane node"},
		{"a worker's name with --control-plane", []string{"join", "--control-plane", "--node-name", "w1"}, 2, "--node-name names a worker"},
		{"a control-plane phase", []string{"join", "phase", "etcd-join", "--token", joinToken}, 2, "phase etcd-join is a phase of `kubeboot join --control-plane`: pass --control-plane"},
		{"two endpoints", []string{"join", c.endpoint, c.endpoint}, 2, "kubeboot join takes what its usage line shows (kubeboot join [ENDPOINT] "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.stderr) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, tt.code, tt.stderr)
			}
			if out := stdout + stderr; strings.Contains(out, joinSecret) || strings.Contains(out, "0123456789abcdeX") {
				t.Errorf("the output quotes the token:\n%s", out)
			}
			if _, err := os.Stat(filepath.Join(node, "bootstrap-kubelet.conf")); !os.IsNotExist(err) {
				t.Error("a refused join wrote bootstrap-kubelet.conf")
			}
		})
	}
}

func TestRedactArgs(t *testing.T) {
	got := redactArgs([]string{"join", "10.0.0.10:6443", "--token", joinToken, "--discovery-token-ca-cert-hash", "sha256:ab", "--token=" + joinToken, "--token"})
	want := []string{"join", "10.0.0.10:6443", "--token", "<hidden>", "--discovery-token-ca-cert-hash", "sha256:ab", "--token=<hidden>", "--token"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestJoinControlPlaneDiscovery: join --control-plane takes a worker's
// discovery; its preflight verifies the cluster with the token and the
// pin, and the node's CA must be the discovered one.
func TestJoinControlPlaneDiscovery(t *testing.T) {
	c := newJoinCluster(t)
	dir := t.TempDir()
	mustWriteFile(t, filepath.Join(dir, "pki", "ca.crt"), c.ca)
	cfg := writeFile(t, dir, "join.yaml", "apiVersion: kubeboot.io/v1alpha1\nkind: JoinConfiguration\n"+
		"controlPlaneEndpoint: "+c.endpoint+"\ncertificates: {dir: "+dir+"/pki}\n"+
		"paths: {manifestsDir: "+dir+"/manifests, kubeconfigDir: "+dir+"}\n"+
		"etcd: {local: {dataDir: "+dir+"/etcd}}\njoin: {etcdEndpoints: [https://127.0.0.1:2379]}\n")
	join := func(pin string) (int, string) {
		code, _, stderr := runCLI(t, "join", "phase", "join-preflight", "--control-plane", "--config", cfg,
			c.endpoint, "--token", joinToken, "--discovery-token-ca-cert-hash", pin)
		return code, stderr
	}
	if code, stderr := join(c.pin); code != 0 || !strings.Contains(stderr, "the cluster CA (the bundle's, or this node's) is the discovered cluster's") {
		t.Fatalf("join-preflight with the cluster's pin: exit %d:\n%s", code, stderr)
	}
	zeros := "sha256:" + strings.Repeat("0", 64)
	if code, stderr := join(zeros); code != 1 || !strings.Contains(stderr, "not the pinned "+zeros) {
		t.Fatalf("join-preflight with a wrong pin: exit %d:\n%s", code, stderr)
	}
	if code, _, stderr := runCLI(t, "join", "phase", "join-preflight", "--control-plane", "--config", cfg,
		c.endpoint, "--token", "abcdef.0123456789abcdeX", "--discovery-token-ca-cert-hash", c.pin); code != 2 || !strings.Contains(stderr, "discovery.token: Invalid value") {
		t.Fatalf("join-preflight with a malformed token: exit %d:\n%s", code, stderr)
	}
}

// mustWriteFile writes data to path, creating its directory.
func mustWriteFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
