package s3store_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/s3store"
	"github.com/kubeboot/kubeboot/internal/s3store/s3test"
	"github.com/kubeboot/kubeboot/pki"
)

// identity maps a node path to itself: the tests run on no --root.
func identity(p string) string { return p }

// open opens the server's bucket, failing the test on an error.
func open(t *testing.T, cfg config.S3Storage) *s3store.Store {
	t.Helper()
	store, err := s3store.Open(cfg, identity)
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// writeRandom writes n random bytes to a new file in dir and returns its
// path and contents.
func writeRandom(t *testing.T, dir, name string, n int) (string, []byte) {
	t.Helper()
	data := make([]byte, n)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// keys are the keys of objects, in order.
func keys(objects []s3store.Object) []string {
	var out []string
	for _, o := range objects {
		out = append(out, o.Key)
	}
	return out
}

// dirNames lists dir.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestStore runs every operation against a real S3 server (SeaweedFS)
// over TLS.
func TestStore(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t, s3test.Options{})
	ctx := context.Background()
	local := t.TempDir()

	t.Run("round trip", func(t *testing.T) {
		// Open reads the files through hostPath, as under --root.
		cfg := srv.Storage
		cfg.CredentialsFile, cfg.CAFile = "/credentials", "/ca.crt"
		store, err := s3store.Open(cfg, func(p string) string { return filepath.Join(srv.Dir, p) })
		if err != nil {
			t.Fatal(err)
		}
		// 20 MiB: more than minio-go's smallest part, so a multipart upload.
		for _, size := range []int{1 << 10, 20 << 20} {
			path, data := writeRandom(t, local, "snapshot.db", size)
			key := "round/trip.db"
			before := time.Now().Add(-time.Minute)
			obj, err := store.Upload(ctx, path, key)
			if err != nil {
				t.Fatal(err)
			}
			if obj.Key != key || obj.Size != int64(size) || obj.Modified.Before(before) {
				t.Errorf("Upload = %+v, want key %s, %d bytes, modified now", obj, key, size)
			}
			list, err := store.List(ctx, "round/")
			if err != nil || len(list) != 1 || list[0].Key != key || list[0].Size != int64(size) {
				t.Errorf("List = %+v, %v; want %s of %d bytes", list, err, key, size)
			}
			back := filepath.Join(local, "back.db")
			if err := store.Download(ctx, key, back); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(back)
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("downloaded %d bytes (%v), uploaded %d: not the same bytes", len(got), err, len(data))
			}
			if st, err := os.Stat(back); err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("downloaded file: %v, %v; want mode 0600", st, err)
			}
		}
		if got, want := store.URL("round/trip.db"), "s3://"+srv.Storage.Bucket+"/round/trip.db"; got != want {
			t.Errorf("URL = %s, want %s", got, want)
		}
	})

	t.Run("list newest first, by prefix", func(t *testing.T) {
		store := open(t, srv.Storage)
		path, _ := writeRandom(t, local, "small.db", 100)
		// The greater key first, then the other a second later (S3
		// times have seconds), so that only the times give the order.
		for _, key := range []string{"node/b.db", "node/sub/a.db"} {
			if _, err := store.Upload(ctx, path, key); err != nil {
				t.Fatal(err)
			}
			time.Sleep(1100 * time.Millisecond)
		}
		for _, key := range []string{"nodes/c.db", "other/d.db"} {
			if _, err := store.Upload(ctx, path, key); err != nil {
				t.Fatal(err)
			}
		}
		list, err := store.List(ctx, "node/")
		if got, want := keys(list), []string{"node/sub/a.db", "node/b.db"}; err != nil || !slices.Equal(got, want) {
			t.Errorf("List(node/) = %v, %v; want %v", got, err, want)
		}
		if len(list) == 2 && !list[0].Modified.After(list[1].Modified) {
			t.Errorf("List(node/) times %v, %v: not newest first", list[0].Modified, list[1].Modified)
		}
		if list, err := store.List(ctx, "none/"); err != nil || len(list) != 0 {
			t.Errorf("List(none/) = %v, %v; want nothing", list, err)
		}

		if err := store.Remove(ctx, "node/sub/a.db"); err != nil {
			t.Fatal(err)
		}
		list, err = store.List(ctx, "node/")
		if got, want := keys(list), []string{"node/b.db"}; err != nil || !slices.Equal(got, want) {
			t.Errorf("after Remove, List(node/) = %v, %v; want %v", got, err, want)
		}
		if err := store.Remove(ctx, "node/sub/a.db"); err != nil {
			t.Errorf("Remove of a removed key: %v, want none, as in S3", err)
		}
	})

	t.Run("failed download keeps the file", func(t *testing.T) {
		store := open(t, srv.Storage)
		dir := t.TempDir()
		path := filepath.Join(dir, "snapshot.db")
		if err := os.WriteFile(path, []byte("the snapshot we have"), 0o600); err != nil {
			t.Fatal(err)
		}
		err := store.Download(ctx, "no/such.db", path)
		if err == nil {
			t.Fatal("Download of a missing key succeeded")
		}
		for _, want := range []string{"download", store.URL("no/such.db"), srv.Storage.Endpoint} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
		if got, err := os.ReadFile(path); err != nil || string(got) != "the snapshot we have" {
			t.Errorf("local file now %q (%v), want it unchanged", got, err)
		}
		if names := dirNames(t, dir); !slices.Equal(names, []string{"snapshot.db"}) {
			t.Errorf("dir holds %v, want only snapshot.db (no temp file)", names)
		}
	})

	t.Run("upload of a directory", func(t *testing.T) {
		store := open(t, srv.Storage)
		if _, err := store.Upload(ctx, t.TempDir(), "dir.db"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("Upload(dir) = %v, want not a regular file", err)
		}
	})

	t.Run("wrong secret", func(t *testing.T) {
		cfg := srv.Storage
		cfg.CredentialsFile = filepath.Join(t.TempDir(), "credentials")
		creds := "[default]\naws_access_key_id = " + srv.AccessKey + "\naws_secret_access_key = wrong" + srv.SecretKey + "\n"
		if err := os.WriteFile(cfg.CredentialsFile, []byte(creds), 0o600); err != nil {
			t.Fatal(err)
		}
		store := open(t, cfg)
		path, _ := writeRandom(t, local, "small.db", 100)
		_, err := store.Upload(ctx, path, "denied.db")
		if err == nil {
			t.Fatal("Upload with a wrong secret succeeded")
		}
		for _, want := range []string{srv.Storage.Endpoint, store.URL("denied.db"), "signature"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
	})

	t.Run("unknown CA", func(t *testing.T) {
		other, err := pki.NewCA(pki.CertSpec{Name: "other", CN: "other", Usage: pki.UsageCA, Algorithm: config.ECDSAP256, Validity: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		cfg := srv.Storage
		cfg.CAFile = filepath.Join(t.TempDir(), "ca.crt")
		if err := os.WriteFile(cfg.CAFile, other.Cert, 0o600); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = open(t, cfg).List(ctx, "")
		if err == nil {
			t.Fatal("List trusting another CA succeeded")
		}
		for _, want := range []string{srv.Storage.Endpoint, "certificate signed by unknown authority"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("the TLS error took %s: retried?", took)
		}
	})
}

// TestOpenBadFiles: a credentials or CA file that is missing or holds no
// key or certificate is a configuration error (exit 2) that names the
// field and the file, before anything crosses the network.
func TestOpenBadFiles(t *testing.T) {
	const good = "[default]\naws_access_key_id = AKID\naws_secret_access_key = SECRET\n"
	const field = "etcd.local.scheduledSnapshots.s3."
	tests := []struct {
		name, credentials, ca string // "" for no file
		want                  []string
	}{
		{"no credentials file", "", "", []string{field + "credentialsFile", "no such file"}},
		{"no secret", "[default]\naws_access_key_id = AKID\n", "", []string{field + "credentialsFile", "no aws_secret_access_key"}},
		{"no key id", "[default]\naws_secret_access_key = S\n", "", []string{field + "credentialsFile", "no aws_access_key_id"}},
		{"keys of another profile", "[prod]\naws_access_key_id = AKID\naws_secret_access_key = S\n[default]\nregion = x\n", "", []string{field + "credentialsFile", "no aws_access_key_id"}},
		{"not INI", "AKID:SECRET\n", "", []string{field + "credentialsFile", "line 1"}},
		{"open section", "[default\n", "", []string{field + "credentialsFile", "line 1", "closing ]"}},
		{"CA not PEM", good, "not a certificate", []string{field + "caFile", "no PEM certificate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := config.S3Storage{Endpoint: "https://127.0.0.1:1", Bucket: "b", CredentialsFile: filepath.Join(dir, "credentials")}
			if tt.credentials != "" {
				if err := os.WriteFile(cfg.CredentialsFile, []byte(tt.credentials), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tt.ca != "" {
				cfg.CAFile = filepath.Join(dir, "ca.crt")
				if err := os.WriteFile(cfg.CAFile, []byte(tt.ca), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, err := s3store.Open(cfg, identity)
			if code := exit.Code(err); code != exit.Usage {
				t.Fatalf("Open: %v (exit %d), want a configuration error (exit %d)", err, code, exit.Usage)
			}
			file := cfg.CredentialsFile
			if strings.Contains(tt.want[0], "caFile") {
				file = cfg.CAFile
			}
			for _, want := range append(tt.want, file) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
		})
	}
	t.Run("http endpoint", func(t *testing.T) {
		cfg := config.S3Storage{Endpoint: "http://127.0.0.1:9000", Bucket: "b", CredentialsFile: "/nonexistent"}
		_, err := s3store.Open(cfg, identity)
		if exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), field+"endpoint") || !strings.Contains(err.Error(), "https") {
			t.Errorf("Open = %v, want the endpoint's error asking for https", err)
		}
	})
	t.Run("missing CA file", func(t *testing.T) {
		dir := t.TempDir()
		cfg := config.S3Storage{Endpoint: "https://127.0.0.1:1", Bucket: "b",
			CredentialsFile: filepath.Join(dir, "credentials"), CAFile: filepath.Join(dir, "ca.crt")}
		if err := os.WriteFile(cfg.CredentialsFile, []byte(good), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := s3store.Open(cfg, identity)
		if exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), field+"caFile "+cfg.CAFile) {
			t.Errorf("Open = %v, want the caFile's error naming %s", err, cfg.CAFile)
		}
	})
}

// offline opens a bucket at an endpoint nothing listens on, for the
// checks that come before the network.
func offline(t *testing.T) *s3store.Store {
	t.Helper()
	credentials := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(credentials, []byte("[default]\naws_access_key_id = AKID\naws_secret_access_key = SECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return open(t, config.S3Storage{Endpoint: "https://127.0.0.1:1", Bucket: "backups", CredentialsFile: credentials})
}

// TestKeysOutsideTheTree: a key with an empty, . or .. part, which a
// store could resolve to another object or bucket, is refused by every
// operation before anything crosses the network, naming the key and the
// form to use; so is the upload of a FIFO, which never waits on it.
func TestKeysOutsideTheTree(t *testing.T) {
	store := offline(t)
	local := filepath.Join(t.TempDir(), "etcd-snapshot.db")
	if err := os.WriteFile(local, []byte("snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, key := range []string{"../other/etcd-snapshot.db", "node-1/../../other/x.db", "/node-1/x.db", "node-1//x.db", "./x.db", "node-1/.."} {
		for op, do := range map[string]func() error{
			"Upload":   func() error { _, err := store.Upload(ctx, local, key); return err },
			"Download": func() error { return store.Download(ctx, key, local) },
			"Remove":   func() error { return store.Remove(ctx, key) },
		} {
			err := do()
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("key %q has an empty, . or .. part", key)) {
				t.Errorf("%s(%q) = %v, want the key refused", op, key, err)
			}
		}
	}
	fifo := filepath.Join(t.TempDir(), "etcd-snapshot.db")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Upload(ctx, fifo, "node-1/etcd-snapshot.db"); err == nil || !strings.Contains(err.Error(), "not a regular file: it is a FIFO") {
		t.Errorf("Upload of a FIFO: %v, want it refused at once", err)
	}
	if _, err := store.List(ctx, "clusters/../"); err == nil || !strings.Contains(err.Error(), "has an empty, . or .. part") {
		t.Errorf("List of a prefix with ..: %v, want it refused", err)
	}
}

// TestEndpointSecretNotEchoed: an endpoint with credentials in it (or a
// query, or a path) is refused, and the error shows neither the secret
// key nor a query that may hold one.
func TestEndpointSecretNotEchoed(t *testing.T) {
	const secret = "wJalrXUtnFEMI0K7MDENG0bPxRfiCYEXAMPLEKEY"
	for _, endpoint := range []string{
		"https://AKIAIOSFODNN7EXAMPLE:" + secret + "@s3.example.com:9000",
		"https://" + secret + "@s3.example.com",
		"https://AKIAIOSFODNN7EXAMPLE:" + secret + "@s3.example.com/backups",
		"https://s3.example.com/?X-Amz-Credential=" + secret,
		"https://s3.example.com#" + secret,
		"https://AKIAIOSFODNN7EXAMPLE:" + secret + " @s3.example.com",
		"https://AKIAIOSFODNN7EXAMPLE:" + secret + "%zz@s3.example.com",
		"AKIAIOSFODNN7EXAMPLE:" + secret + "@s3.example.com",
	} {
		_, err := s3store.Open(config.S3Storage{Endpoint: endpoint, Bucket: "backups", CredentialsFile: "/nonexistent"}, identity)
		if exit.Code(err) != exit.Usage || !strings.Contains(err.Error(), "etcd.local.scheduledSnapshots.s3.endpoint") || !strings.Contains(err.Error(), "no path, query, fragment or credentials") {
			t.Errorf("Open(%q) = %v, want the endpoint refused", endpoint, err)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("Open(%q): the error shows the secret key: %v", endpoint, err)
		}
	}
}

func TestParseURL(t *testing.T) {
	tests := []struct {
		raw, bucket, key string
		err              string
	}{
		{raw: "s3://backups/node-1/etcd-snapshot.db", bucket: "backups", key: "node-1/etcd-snapshot.db"},
		{raw: "s3://b/k", bucket: "b", key: "k"},
		{raw: "s3://b/a b?c#d", bucket: "b", key: "a b?c#d"},
		{raw: "/var/lib/snapshot.db", err: "not an s3:// URL"},
		{raw: "https://b/k", err: "not an s3:// URL"},
		{raw: "S3://b/k", err: "not an s3:// URL"},
		{raw: "s3://", err: "names no bucket"},
		{raw: "s3:///k", err: "names no bucket"},
		{raw: "s3://bucket", err: "names no object"},
		{raw: "s3://bucket/", err: "names no object"},
		{raw: "s3://bucket/dir/", err: "names no object"},
		{raw: "s3://backups/../other/etcd-snapshot-20260101T000000.000Z.db", err: `key "../other/etcd-snapshot-20260101T000000.000Z.db" has an empty, . or .. part`},
		{raw: "s3://backups/node-1/../../other/x.db", err: "has an empty, . or .. part"},
		{raw: "s3://backups/./x.db", err: "has an empty, . or .. part"},
		{raw: "s3://backups//x.db", err: "has an empty, . or .. part"},
		{raw: "s3://backups/node-1//x.db", err: "has an empty, . or .. part"},
		{raw: "s3://backups/..", err: "has an empty, . or .. part"},
	}
	for _, tt := range tests {
		bucket, key, err := s3store.ParseURL(tt.raw)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || exit.Code(err) != exit.Usage {
				t.Errorf("ParseURL(%q) = %q, %q, %v; want a usage error %q", tt.raw, bucket, key, err, tt.err)
			}
			continue
		}
		if err != nil || bucket != tt.bucket || key != tt.key {
			t.Errorf("ParseURL(%q) = %q, %q, %v; want %q, %q", tt.raw, bucket, key, err, tt.bucket, tt.key)
		}
	}
}

// TestServerStops: when the test that started it ends, the S3 server has
// no process left. (That it leaves no socket or log file behind is
// s3test's TestStartUsesOnlyItsOwnFiles: it knows the server's own
// paths, where a look over /tmp would also see the paths other tests'
// servers have claimed and are starting on.)
func TestServerStops(t *testing.T) {
	t.Parallel()
	var dir string
	t.Run("server", func(t *testing.T) {
		dir = s3test.Start(t, s3test.Options{Bucket: "other-bucket"}).Dir
	})
	if dir == "" {
		return // the subtest failed: it could not start the server
	}
	out, err := exec.Command("pgrep", "-a", "-f", dir).Output()
	if err == nil || len(out) > 0 {
		t.Errorf("processes of the stopped server remain: %s", out)
	}
}

// TestServerInNetns runs the server in a network namespace, as the
// end-to-end suite does on a lab node's, reached over a veth pair.
func TestServerInNetns(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("a network namespace needs root")
	}
	ns, host, peer := fmt.Sprintf("s3test-%d", os.Getpid()), fmt.Sprintf("s3h%d", os.Getpid()), fmt.Sprintf("s3n%d", os.Getpid())
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	// ip netns add makes /run/netns, a mount point, when it is missing:
	// then the test removes it again.
	_, err := os.Stat("/run/netns")
	madeDir := errors.Is(err, fs.ErrNotExist)
	run("netns", "add", ns)
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", ns).Run()
		if entries, err := os.ReadDir("/run/netns"); madeDir && err == nil && len(entries) == 0 {
			_ = syscall.Unmount("/run/netns", syscall.MNT_DETACH)
			_ = os.Remove("/run/netns")
		}
	})
	run("link", "add", host, "type", "veth", "peer", "name", peer, "netns", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", host).Run() })
	run("addr", "add", "10.251.7.1/30", "dev", host)
	run("link", "set", host, "up")
	run("-n", ns, "addr", "add", "10.251.7.2/30", "dev", peer)
	run("-n", ns, "link", "set", peer, "up")
	run("-n", ns, "link", "set", "lo", "up") // weed reaches itself at its address

	srv := s3test.Start(t, s3test.Options{Address: "10.251.7.2", Netns: ns})
	path, data := writeRandom(t, t.TempDir(), "snapshot.db", 1000)
	store := open(t, srv.Storage)
	if _, err := store.Upload(context.Background(), path, "in/netns.db"); err != nil {
		t.Fatal(err)
	}
	back := filepath.Join(t.TempDir(), "back.db")
	if err := store.Download(context.Background(), "in/netns.db", back); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(back); err != nil || !bytes.Equal(got, data) {
		t.Errorf("downloaded %d bytes (%v), not the %d uploaded", len(got), err, len(data))
	}
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	if len(bytes.Fields(out)) != 1 {
		t.Errorf("processes in %s: %q, want the server's one", ns, out)
	}
}
