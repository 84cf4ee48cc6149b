// Package s3test runs a real S3 server for tests: SeaweedFS's weed, as
// test/tools builds it, serving TLS with a certificate of a fresh CA, one
// identity and one bucket, its data in the test's temp dir, until the
// test ends. The unit tests of s3store and the end-to-end suite use it.
package s3test

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/pki"
)

const (
	// DefaultBucket is the bucket Start creates unless Options names one.
	DefaultBucket = "kubeboot-snapshots"
	// startTimeout bounds the wait for the server to store objects.
	startTimeout = 90 * time.Second
)

// Options say where the server runs.
type Options struct {
	// Address is the IP address it listens on and its certificate names,
	// which the test's own network namespace must reach; default 127.0.0.1.
	Address string
	// Netns is the network namespace to run it in (`ip netns exec`),
	// empty for the test's own. Its loopback must be up: weed reaches
	// itself at Address.
	Netns string
	// Bucket is the bucket to create; default DefaultBucket.
	Bucket string
	// DialContext, when set, is how this process reaches the server to
	// check that it is ready: for a server in another network namespace,
	// a dialer that enters it.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Server is a running S3 server.
type Server struct {
	// Storage is the bucket as kubeboot's configuration names it: its
	// Endpoint, Bucket, CredentialsFile and CAFile are set.
	Storage config.S3Storage
	// AccessKey and SecretKey are the server's one identity, which the
	// credentials file holds.
	AccessKey, SecretKey string
	// Dir holds the server's data, configuration and log, and the
	// credentials and CA files; every process of the server names it on
	// its command line.
	Dir string
}

// ports are the listeners of one weed server.
type ports struct {
	s3, s3GRPC, master, masterGRPC, volume, volumeGRPC, filer, filerGRPC int
}

// Start runs weed from $KUBEBOOT_BIN_DIR as an S3 server over TLS on
// opts.Address, waits until it has created the bucket and stores objects
// (about 11 s: weed's master and filer wait out a few heartbeats before
// the first write), and kills it when the test ends. A missing weed skips
// the test, or fails it under CI, which builds it.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Address == "" {
		opts.Address = "127.0.0.1"
	}
	if opts.Bucket == "" {
		opts.Bucket = DefaultBucket
	}
	weed := weedBinary(t)
	dir := t.TempDir()
	srv := &Server{AccessKey: randomHex(t, 10), SecretKey: randomHex(t, 20), Dir: dir}
	srv.Storage = config.S3Storage{
		Bucket:          opts.Bucket,
		CredentialsFile: filepath.Join(dir, "credentials"),
		CAFile:          filepath.Join(dir, "ca.crt"),
	}
	writeFiles(t, srv, opts.Address)
	logPath := filepath.Join(dir, "weed.log")
	for attempt := 1; ; attempt++ {
		p := freePorts(t, opts)
		srv.Storage.Endpoint = "https://" + net.JoinHostPort(opts.Address, strconv.Itoa(p.s3))
		start := time.Now()
		proc := run(t, command(weed, opts, dir, p), logPath)
		err := ready(srv, proc, opts.DialContext)
		if err == nil {
			t.Cleanup(func() { proc.stop(t) })
			t.Logf("S3 server at %s (bucket %s) ready in %s", srv.Storage.Endpoint, opts.Bucket, time.Since(start).Round(time.Millisecond))
			return srv
		}
		proc.stop(t)
		log, _ := os.ReadFile(logPath)
		// The ports were free when picked, then let go until weed binds
		// them: another process may take one meanwhile. Pick again, with
		// a fresh data dir, which records the ports.
		if attempt < startAttempts && strings.Contains(string(log), portTaken) {
			t.Logf("the S3 server at %s: a port was taken before weed bound it, attempt %d of %d", srv.Storage.Endpoint, attempt, startAttempts)
			if err := os.RemoveAll(filepath.Join(dir, "data")); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Fatalf("the S3 server at %s: %v; its log:\n%s", srv.Storage.Endpoint, err, tail(string(log), 4000))
	}
}

// startAttempts bounds Start's attempts with new ports, and portTaken is
// what weed logs when one of its ports was taken before it bound it.
const (
	startAttempts = 5
	portTaken     = "bind: address already in use"
)

// weedBinary is $KUBEBOOT_BIN_DIR/weed.
func weedBinary(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("KUBEBOOT_BIN_DIR")
	bin := filepath.Join(dir, "weed")
	_, err := os.Stat(bin)
	if dir != "" && err == nil {
		return bin
	}
	msg := fmt.Sprintf("the S3 server needs weed in $KUBEBOOT_BIN_DIR (%q): build it with `make binaries` and set KUBEBOOT_BIN_DIR=test/tools/bin", dir)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// command is weed's command line: master, volume server, filer and S3
// gateway in one process, every listener on address, no telemetry.
func command(weed string, opts Options, dir string, p ports) *exec.Cmd {
	// -logtostderr: its log goes to weed.log alone, not to files in /tmp.
	args := []string{weed, "-logtostderr", "server",
		"-ip=" + opts.Address, "-ip.bind=" + opts.Address,
		"-dir=" + filepath.Join(dir, "data"),
		"-master.port=" + strconv.Itoa(p.master), "-master.port.grpc=" + strconv.Itoa(p.masterGRPC),
		"-master.telemetry=false", "-master.volumeSizeLimitMB=64",
		"-volume.port=" + strconv.Itoa(p.volume), "-volume.port.grpc=" + strconv.Itoa(p.volumeGRPC),
		"-volume.preStopSeconds=0",
		"-filer.port=" + strconv.Itoa(p.filer), "-filer.port.grpc=" + strconv.Itoa(p.filerGRPC),
		"-filer.localSocket=" + filepath.Join(dir, "filer.sock"),
		"-s3", "-s3.port=" + strconv.Itoa(p.s3), "-s3.port.grpc=" + strconv.Itoa(p.s3GRPC),
		"-s3.port.iceberg=0", "-s3.port.lance=0",
		"-s3.localSocket=" + filepath.Join(dir, "s3.sock"),
		"-s3.config=" + filepath.Join(dir, "s3.json"),
		"-s3.cert.file=" + filepath.Join(dir, "server.crt"), "-s3.key.file=" + filepath.Join(dir, "server.key"),
	}
	if opts.Netns != "" {
		args = append([]string{"ip", "netns", "exec", opts.Netns}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	// Its own directory and HOME, so that no security.toml or other
	// configuration of this machine's applies.
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir)
	// A process group of its own, which stop kills whole; and killed
	// with the test process, should that die first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// process is the running server.
type process struct {
	cmd *exec.Cmd
	// done is closed once the process has exited, with err its Wait's.
	done chan struct{}
	err  error
}

// run starts cmd with its output to logPath.
func run(t testing.TB, cmd *exec.Cmd, logPath string) *process {
	t.Helper()
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	proc := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		proc.err = cmd.Wait()
		_ = log.Close()
		close(proc.done)
	}()
	return proc
}

// stop kills the server's process group and waits for it.
func (proc *process) stop(t testing.TB) {
	_ = syscall.Kill(-proc.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-proc.done:
	case <-time.After(30 * time.Second):
		t.Errorf("the S3 server (pid %d) did not exit after SIGKILL", proc.cmd.Process.Pid)
	}
}

// writeFiles writes the server's certificate, key and S3 identity, and
// the client's credentials and CA files.
func writeFiles(t testing.TB, srv *Server, address string) {
	t.Helper()
	ca, cert := issue(t, address)
	identities, err := json.Marshal(map[string]any{"identities": []any{map[string]any{
		"name":        "kubeboot",
		"credentials": []any{map[string]string{"accessKey": srv.AccessKey, "secretKey": srv.SecretKey}},
		"actions":     []string{"Admin", "Read", "List", "Tagging", "Write"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"ca.crt":     ca.Cert,
		"server.crt": cert.Cert,
		"server.key": cert.Key,
		"s3.json":    identities,
		"credentials": fmt.Appendf(nil, "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n",
			srv.AccessKey, srv.SecretKey),
	}
	if err := os.Mkdir(filepath.Join(srv.Dir, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(srv.Dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// issue creates a CA and the server's certificate for address, an IP
// address or a DNS name.
func issue(t testing.TB, address string) (ca, cert pki.KeyPair) {
	t.Helper()
	ca, err := pki.NewCA(pki.CertSpec{Name: "s3-ca", CN: "s3test-ca", Usage: pki.UsageCA,
		Algorithm: config.ECDSAP256, Validity: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	spec := pki.CertSpec{Name: "s3", CN: "s3test", Usage: pki.UsageServer, CA: "s3-ca",
		Algorithm: config.ECDSAP256, Validity: 24 * time.Hour}
	if ip := net.ParseIP(address); ip != nil {
		spec.IPs = []net.IP{ip}
	} else {
		spec.DNS = []string{address}
	}
	if cert, err = pki.Issue(spec, ca, nil); err != nil {
		t.Fatal(err)
	}
	return ca, cert
}

// ready waits until the server stores objects: it answers S3 requests
// seconds before its master allocates volumes and its filer takes locks,
// so it creates the bucket, then writes and removes an object.
func ready(srv *Server, proc *process, dial func(ctx context.Context, network, addr string) (net.Conn, error)) error {
	client, err := client(srv, dial)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	bucket, probe := srv.Storage.Bucket, "s3test-probe"
	steps := []struct {
		what string
		do   func(context.Context) error
	}{
		{"create bucket " + bucket, func(ctx context.Context) error {
			err := client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{})
			if minio.ToErrorResponse(err).Code == "BucketAlreadyOwnedByYou" {
				return nil // an attempt that timed out made it
			}
			return err
		}},
		{"write an object", func(ctx context.Context) error {
			_, err := client.PutObject(ctx, bucket, probe, strings.NewReader(probe), int64(len(probe)), minio.PutObjectOptions{})
			return err
		}},
		{"remove it", func(ctx context.Context) error {
			return client.RemoveObject(ctx, bucket, probe, minio.RemoveObjectOptions{})
		}},
	}
	for _, step := range steps {
		if err := retry(ctx, proc, step.do); err != nil {
			return fmt.Errorf("%s: %w", step.what, err)
		}
	}
	return nil
}

// retry runs do until it succeeds, ctx ends or weed exits.
func retry(ctx context.Context, proc *process, do func(context.Context) error) error {
	for {
		attempt, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := do(attempt)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-proc.done:
			return fmt.Errorf("weed exited (%w): %w", proc.err, err)
		case <-ctx.Done():
			return fmt.Errorf("not in %s: %w", startTimeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// client is an S3 client of srv's identity that trusts its CA.
func client(srv *Server, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*minio.Client, error) {
	caPEM, err := os.ReadFile(srv.Storage.CAFile)
	if err != nil {
		return nil, err
	}
	transport, err := minio.DefaultTransport(true)
	if err != nil {
		return nil, err
	}
	if dial != nil {
		transport.DialContext = dial
	}
	transport.TLSClientConfig.RootCAs = x509.NewCertPool()
	if !transport.TLSClientConfig.RootCAs.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("the server's CA file holds no certificate")
	}
	return minio.New(strings.TrimPrefix(srv.Storage.Endpoint, "https://"), &minio.Options{
		Creds:        credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""),
		Secure:       true,
		Transport:    transport,
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   1,
	})
}

// freePorts picks TCP ports for every listener that are free on the
// address, or for a server in another network namespace, on this one's
// loopback: ephemeral ports free here are all but surely free there.
//
// weed also serves each gRPC listener on a Unix socket whose path it
// makes from the port alone, /tmp/seaweedfs-<service>-grpc-<port>.sock,
// and removes whatever is there first. Two servers in different network
// namespaces, in this test process or another, may hold the same port
// number, and one would then take the other's socket. So the gRPC ports'
// socket paths are claimed too, with a file created only where none is
// (weed replaces it with its socket); a port whose path is taken is
// picked again. The claims and sockets are removed when the test ends.
func freePorts(t testing.TB, opts Options) ports {
	t.Helper()
	address := opts.Address
	if opts.Netns != "" {
		address = "127.0.0.1"
	}
	for range 20 {
		p := pickPorts(t, address)
		if claimSockets(t, p) {
			return p
		}
	}
	t.Fatalf("no free gRPC ports on %s: every pick's socket path in /tmp was taken", address)
	return ports{}
}

// pickPorts picks eight different ports free on address.
func pickPorts(t testing.TB, address string) ports {
	t.Helper()
	var got [8]int
	for i := range got {
		l, err := net.Listen("tcp", net.JoinHostPort(address, "0"))
		if err != nil {
			t.Fatalf("find a free port on %s: %v", address, err)
		}
		defer func() { _ = l.Close() }() // held until all are picked, so they differ
		got[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports{s3: got[0], s3GRPC: got[1], master: got[2], masterGRPC: got[3],
		volume: got[4], volumeGRPC: got[5], filer: got[6], filerGRPC: got[7]}
}

// socketPaths are the Unix sockets weed serves p's gRPC listeners on.
func socketPaths(p ports) []string {
	var paths []string
	for _, s := range []struct {
		name string
		port int
	}{{"master", p.masterGRPC}, {"volume", p.volumeGRPC}, {"filer", p.filerGRPC}, {"s3", p.s3GRPC}} {
		paths = append(paths, fmt.Sprintf("/tmp/seaweedfs-%s-grpc-%d.sock", s.name, s.port))
	}
	return paths
}

// claimSockets creates p's socket paths, each only where nothing is, and
// removes them when the test ends. It reports false, with nothing left
// claimed, when a path is taken.
func claimSockets(t testing.TB, p ports) bool {
	t.Helper()
	var claimed []string
	release := func() {
		for _, path := range claimed {
			_ = os.Remove(path)
		}
	}
	for _, path := range socketPaths(p) {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if errors.Is(err, fs.ErrExist) {
			release()
			return false
		}
		if err != nil {
			release()
			t.Fatalf("claim the S3 server's gRPC socket path: %v", err)
		}
		_ = f.Close()
		claimed = append(claimed, path)
	}
	t.Cleanup(release)
	return true
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// tail is the end of a log, at most n bytes.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
