package controlplane

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"reflect"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/templates"
)

// componentEnv makes the test binary a stand-in component: it serves
// HTTPS on the address in it, with the certificate and key files named in
// componentCertEnv and componentKeyEnv, until it is killed.
const (
	componentEnv     = "PHASES_TEST_COMPONENT_ADDR"
	componentCertEnv = "PHASES_TEST_COMPONENT_CERT"
	componentKeyEnv  = "PHASES_TEST_COMPONENT_KEY"
	// componentLingerEnv makes the stand-in close its socket on SIGTERM
	// and exit that long after, as a shutting-down API server does.
	componentLingerEnv = "PHASES_TEST_COMPONENT_LINGER"
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(componentEnv); addr != "" {
		if err := serveComponent(addr, os.Getenv(componentCertEnv), os.Getenv(componentKeyEnv)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveComponent is the stand-in component's main. It serves until killed
// or, with componentLingerEnv set, until SIGTERM: then it closes its socket
// and returns nil that long after.
func serveComponent(addr, certFile, keyFile string) error {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return err
	}
	linger, lingerErr := time.ParseDuration(os.Getenv(componentLingerEnv))
	terms := make(chan os.Signal, 1)
	if lingerErr == nil {
		// Before it listens: a SIGTERM may come as soon as it does.
		signal.Notify(terms, syscall.SIGTERM)
	}
	// The previous instance's socket may still be closing.
	var ln net.Listener
	for range 100 {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), ErrorLog: log.New(io.Discard, "", 0),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	if lingerErr != nil {
		return srv.ServeTLS(ln, "", "")
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	<-terms
	_ = ln.Close()
	time.Sleep(linger)
	return nil
}

// startComponent starts a stand-in scheduler process on addr, serving the
// scheduler's certificate, with the extra environment given.
func startComponent(t *testing.T, s *phases.Node, addr string, env ...string) *exec.Cmd {
	t.Helper()
	c := s.Config
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), componentEnv+"="+addr,
		componentCertEnv+"="+s.Files.HostPath(c.CertPath(config.CertScheduler)), componentKeyEnv+"="+s.Files.HostPath(c.KeyPath(config.CertScheduler)))
	cmd.Env = append(cmd.Env, env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// fakeKubelet runs the scheduler's manifest as the kubelet runs a static
// pod, with a stand-in process: it starts one while the manifest is in the
// manifest dir, stops it when the manifest goes, and replaces it when the
// pod the manifest decodes to changes (not for comments or layout). A pod
// whose command has --bogus-flag makes a process that exits at once. Each
// process loads the serving certificate at start.
type fakeKubelet struct {
	// addr is where the stand-in scheduler listens.
	addr string
	// stale makes every process serve the certificate the first one loaded.
	stale bool
	// ignoreChanges makes it keep the first process whatever the manifest
	// says, as a kubelet that does not notice a change.
	ignoreChanges bool

	mu     sync.Mutex
	starts int
}

func (k *fakeKubelet) started() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.starts
}

// start runs the fake kubelet until the test ends and waits for the first
// instance to listen.
func (k *fakeKubelet) start(t *testing.T, s *phases.Node) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { k.run(ctx, t, s); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitListening(t, k.addr, true)
}

// waitListening waits up to 10 s until something listens on addr (want)
// or nothing does (!want).
func waitListening(t *testing.T, addr string, want bool) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	l := []phases.Listener{{Component: "the stand-in", Host: host, Port: port}}
	for deadline := time.Now().Add(10 * time.Second); (len(openListeners(l)) > 0) != want; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: listening is not %v after 10 s", addr, want)
		}
	}
}

func (k *fakeKubelet) run(ctx context.Context, t *testing.T, s *phases.Node) {
	c := s.Config
	manifest := s.Files.HostPath(c.ManifestPath(config.NameScheduler))
	var env []string
	if k.stale {
		cert, key := s.Files.HostPath(c.CertPath(config.CertScheduler)), s.Files.HostPath(c.KeyPath(config.CertScheduler))
		env = []string{componentCertEnv + "=" + copyFile(t, cert), componentKeyEnv + "=" + copyFile(t, key)}
	}
	var proc *exec.Cmd
	var running *corev1.Pod // the pod proc runs
	stop := func() {
		if proc != nil {
			_ = proc.Process.Kill()
			_ = proc.Wait()
			proc = nil
		}
	}
	defer stop()
	for ctx.Err() == nil {
		pod, err := readManifest(manifest)
		switch {
		case err != nil:
			stop()
			running = nil
		case !reflect.DeepEqual(pod, running) && (!k.ignoreChanges || running == nil):
			stop()
			running = pod
			if slices.Contains(pod.Spec.Containers[0].Command, "--bogus-flag") {
				break // a component that exits at once never listens
			}
			proc = startComponent(t, s, k.addr, env...)
			k.mu.Lock()
			k.starts++
			k.mu.Unlock()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readManifest decodes the manifest at a host path.
func readManifest(path string) (*corev1.Pod, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return phases.DecodePod(path, data)
}

// withArg returns a manifest whose first container has arg appended to
// its command.
func withArg(t *testing.T, manifest []byte, arg string) []byte {
	t.Helper()
	pod, err := phases.DecodePod("manifest", manifest)
	if err != nil {
		t.Fatal(err)
	}
	pod.Spec.Containers[0].Command = append(pod.Spec.Containers[0].Command, arg)
	data, err := templates.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// copyFile copies a file into the test's temp dir and returns the copy.
func copyFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	copied := t.TempDir() + "/copy"
	if err := os.WriteFile(copied, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return copied
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}

// must fails the test on an error.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
