package hostile

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/pki"
)

// skip leaves out the phases that need a running kubelet or this host.
var skip = []string{"--skip-phases", "wait,bootstrap-admin,preflight"}

// env is one row's temp dir. Nothing in it may change but what the row
// allows; node is the --root of the rows that need a node.
type env struct {
	t         *testing.T
	dir, node string
}

// path is a path under the row's temp dir.
func (e env) path(rel string) string { return filepath.Join(e.dir, rel) }

// kubeboot runs kubeboot for a row's setup, which must succeed.
func (e env) kubeboot(args ...string) {
	e.t.Helper()
	if res := run(e.t, e.dir, args...); res.code != 0 {
		e.t.Fatalf("setup: kubeboot %v: exit %d: %s", args, res.code, res.stderr)
	}
}

// initNode runs init on the node, offline.
func (e env) initNode() {
	e.t.Helper()
	e.kubeboot(append([]string{"init", "--root", e.node}, skip...)...)
}

// config writes a ClusterConfiguration with the given fields.
func (e env) config(name, fields string) string {
	e.t.Helper()
	path := e.path(name)
	writeFile(e.t, path, "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\n"+fields, 0o600)
	return path
}

// shortCA places a cluster CA valid for two days on the node, as a user
// who brings their own CA might.
func (e env) shortCA() {
	e.t.Helper()
	ca, err := pki.NewCA(pki.CertSpec{Name: config.CertCA, CN: "kubernetes", Usage: pki.UsageCA, Algorithm: config.ECDSAP256, Validity: 48 * time.Hour})
	if err != nil {
		e.t.Fatal(err)
	}
	pkiDir := filepath.Join(e.node, "/etc/kubernetes/pki")
	writeFile(e.t, filepath.Join(pkiDir, "ca.crt"), string(ca.Cert), 0o644)
	writeFile(e.t, filepath.Join(pkiDir, "ca.key"), string(ca.Key), 0o600)
}

// row is one hostile or careless use of kubeboot.
type row struct {
	defect, name string
	// setup prepares the temp dir and returns kubeboot's arguments.
	setup func(e env) []string
	// cwd is the directory kubeboot runs in, relative to the temp dir.
	cwd string
	// run replaces the plain run of kubeboot, for rows about timing.
	run func(e env, args []string) result
	// code and message are the exit code and a part of stderr.
	code    int
	message string
	// within bounds the run's duration; zero means a minute.
	within time.Duration
	// allowed are the paths, relative to the temp dir, that may change.
	allowed []string
	// check makes the row's own checks after the run.
	check func(e env, res result)
}

var rows = []row{
	{
		defect: "B1", name: "certs export --out into a sticky dir keeps its mode",
		setup: func(e env) []string {
			e.initNode()
			shared := e.path("sh")
			if err := os.Mkdir(shared, 0o755); err != nil {
				e.t.Fatal(err)
			}
			if err := os.Chmod(shared, 0o777|fs.ModeSticky); err != nil {
				e.t.Fatal(err)
			}
			writeFile(e.t, e.path("k.hex"), strings.Repeat("ab", 32)+"\n", 0o600)
			return []string{"certs", "export", "--root", e.node, "--out", e.path("sh/s.bundle"), "--key-file", e.path("k.hex")}
		},
		code: 0, allowed: []string{"/sh/s.bundle"},
		check: func(e env, _ result) {
			if m := mode(e.t, e.path("sh")); m != fs.ModeDir|fs.ModeSticky|0o777 {
				e.t.Errorf("sh is %v, want drwxrwxrwt", m)
			}
		},
	},
	{
		defect: "B1", name: "certs export with a relative --out keeps the current dir's mode",
		setup: func(e env) []string {
			e.initNode()
			if err := os.Mkdir(e.path("cwd"), 0o755); err != nil {
				e.t.Fatal(err)
			}
			writeFile(e.t, e.path("k.hex"), strings.Repeat("ab", 32)+"\n", 0o600)
			return []string{"certs", "export", "--root", e.node, "--out", "s.bundle", "--key-file", e.path("k.hex")}
		},
		cwd: "cwd", code: 0, allowed: []string{"/cwd/s.bundle"},
	},
	{
		defect: "B2", name: "init refuses etcd.local.dataDir /var/lib",
		setup: func(e env) []string {
			return append([]string{"init", "--root", e.node, "--config", e.config("c.yaml", "etcd: {local: {dataDir: /var/lib}}\n")}, skip...)
		},
		code: 2, message: `etcd.local.dataDir: Invalid value: "/var/lib": a system directory`,
	},
	{
		defect: "B2", name: "init refuses certificates.dir /etc and security.audit.logDir /var/log",
		setup: func(e env) []string {
			c := e.config("c.yaml", "certificates: {dir: /etc}\nsecurity: {audit: {logDir: /var/log}}\n")
			return append([]string{"init", "--root", e.node, "--config", c}, skip...)
		},
		code: 2, message: "a system directory",
	},
	{
		defect: "B2", name: "reset refuses etcd.local.dataDir /var/lib",
		setup: func(e env) []string {
			e.initNode()
			return []string{"reset", "--root", e.node, "--force", "--config", e.config("c.yaml", "etcd: {local: {dataDir: /var/lib}}\n")}
		},
		code: 2, message: `etcd.local.dataDir: Invalid value: "/var/lib"`,
	},
	{
		defect: "B3", name: "init --root keeps an absolute symlink inside the root",
		setup: func(e env) []string {
			if err := os.MkdirAll(e.path("node/etc/kubernetes"), 0o755); err != nil {
				e.t.Fatal(err)
			}
			if err := os.Mkdir(e.path("out"), 0o755); err != nil {
				e.t.Fatal(err)
			}
			if err := os.Symlink(e.path("out"), e.path("node/etc/kubernetes/manifests")); err != nil {
				e.t.Fatal(err)
			}
			return append([]string{"init", "--root", e.node}, skip...)
		},
		code: 0, allowed: []string{"/node"},
	},
	{
		defect: "B3", name: "reset --root keeps an absolute symlink inside the root",
		setup: func(e env) []string {
			e.initNode()
			writeFile(e.t, e.path("out/etcd.yaml"), "not kubeboot's", 0o644)
			manifests := e.path("node/etc/kubernetes/manifests")
			if err := os.RemoveAll(manifests); err != nil {
				e.t.Fatal(err)
			}
			if err := os.Symlink(e.path("out"), manifests); err != nil {
				e.t.Fatal(err)
			}
			return []string{"reset", "--root", e.node, "--force"}
		},
		code: 0, allowed: []string{"/node"},
	},
	{
		defect: "B4", name: "a FIFO config fails at once",
		setup: func(e env) []string {
			mkfifo(e.t, e.path("f.yaml"))
			return []string{"init", "--dry-run", "--config", e.path("f.yaml")}
		},
		code: 2, message: "not a regular file: it is a FIFO", within: 5 * time.Second,
	},
	{
		defect: "B4", name: "SIGTERM ends a run blocked on a FIFO patch",
		setup: func(e env) []string {
			mkfifo(e.t, e.path("node/patches/kube-apiserver.yaml"))
			return append([]string{"init", "--root", e.node, "--config", e.config("c.yaml", "patchesDir: /patches\n")}, skip...)
		},
		run: func(e env, args []string) result { return terminatedAfter(e, args, 2*time.Second) },
		// Either the patch is refused at once, or the run is interrupted.
		code: 1, message: "", within: 15 * time.Second, allowed: []string{"/node"},
		check: func(e env, res result) {
			if !strings.Contains(res.stderr, "interrupted") && !strings.Contains(res.stderr, "not a regular file") {
				e.t.Errorf("stderr neither refuses the FIFO nor says the run was interrupted: %s", res.stderr)
			}
		},
	},
	{
		defect: "B5", name: "config validate /dev/zero",
		setup: func(env) []string { return []string{"config", "validate", "/dev/zero"} },
		code:  2, message: "not a regular file: it is a character device", within: 10 * time.Second,
	},
	{
		defect: "B5", name: "validate /dev/zero",
		setup: func(env) []string { return []string{"validate", "/dev/zero"} },
		code:  1, message: "not a regular file", within: 10 * time.Second,
	},
	{
		defect: "B5", name: "a config past the size limit",
		setup: func(e env) []string {
			big := "apiVersion: kubeboot.io/v1alpha1\nkind: ClusterConfiguration\napiServer:\n  certSANs:\n" + strings.Repeat("  - a.example.com\n", 300000)
			writeFile(e.t, e.path("big.yaml"), big, 0o600)
			return []string{"init", "--dry-run", "--config", e.path("big.yaml")}
		},
		code: 2, message: "file too large", within: 10 * time.Second,
	},
	{
		defect: "B6", name: "first init with a CA expiring within the window warns, naming it",
		setup: func(e env) []string {
			e.shortCA()
			return append([]string{"init", "--root", e.node}, skip...)
		},
		code: 0, message: "/etc/kubernetes/pki/ca.crt expires ", allowed: []string{"/node"},
	},
	{
		defect: "B6", name: "the next init accepts the node, writes nothing and warns",
		setup: func(e env) []string {
			e.shortCA()
			e.initNode()
			return append([]string{"init", "--root", e.node}, skip...)
		},
		code: 0, message: "/etc/kubernetes/pki/ca.crt expires ",
	},
	{
		defect: "B6", name: "init --renew writes nothing and warns",
		setup: func(e env) []string {
			e.shortCA()
			e.initNode()
			return append([]string{"init", "--root", e.node, "--renew"}, skip...)
		},
		code: 0, message: "re-create the cluster PKI",
	},
	{
		defect: "B6", name: "init --strict fails on the CA",
		setup: func(e env) []string {
			e.shortCA()
			e.initNode()
			return append([]string{"init", "--root", e.node, "--strict"}, skip...)
		},
		code: 1, message: `check CA "ca" (--strict): /etc/kubernetes/pki/ca.crt expires `,
	},
	{
		defect: "B7", name: "a second init while one runs fails at once",
		setup: func(e env) []string {
			return append([]string{"init", "--root", e.node, "--config", e.config("rsa.yaml", "certificates: {keyAlgorithm: rsa-3072}\n")}, skip...)
		},
		run:  concurrentInit,
		code: 1, message: "is changing this node", within: 5 * time.Second, allowed: []string{"/node"},
	},
	{
		defect: "B8", name: "reset keeps a foreign file",
		setup: func(e env) []string {
			e.initNode()
			writeFile(e.t, e.path("node/etc/kubernetes/apiserver/my-audit-policy.yaml"), "mine", 0o600)
			return []string{"reset", "--root", e.node, "--force"}
		},
		code: 0, message: "my-audit-policy.yaml", allowed: []string{"/node"},
		check: func(e env, _ result) {
			if data, err := os.ReadFile(e.path("node/etc/kubernetes/apiserver/my-audit-policy.yaml")); string(data) != "mine" {
				e.t.Errorf("the user's file is gone or changed: %q, %v", data, err)
			}
		},
	},
}

func TestHostileInput(t *testing.T) { runRows(t, rows) }

// runRows runs each row in a temp dir of its own and checks its exit code,
// its message, that it did not crash, and that nothing but what it allows
// changed.
func runRows(t *testing.T, rows []row) {
	t.Helper()
	for _, r := range rows {
		t.Run(r.defect+"/"+r.name, func(t *testing.T) {
			dir := t.TempDir()
			e := env{t: t, dir: dir, node: filepath.Join(dir, "node")}
			args := r.setup(e)
			before := tree(t, dir)
			var res result
			if r.run != nil {
				res = r.run(e, args)
			} else {
				res = run(t, filepath.Join(dir, r.cwd), args...)
			}
			if res.code != r.code || !strings.Contains(res.stderr, r.message) {
				t.Errorf("kubeboot %s: exit %d, stderr:\n%s\nwant exit %d and %q", strings.Join(args, " "), res.code, res.stderr, r.code, r.message)
			}
			for _, crash := range []string{"fatal error:", "panic:", "goroutine "} {
				if strings.Contains(res.stderr, crash) {
					t.Errorf("kubeboot crashed: %s", res.stderr)
				}
			}
			if r.within > 0 && res.took > r.within {
				t.Errorf("took %s, want at most %s", res.took.Round(time.Millisecond), r.within)
			}
			for _, c := range changed(before, tree(t, dir), r.allowed) {
				t.Errorf("changed: %s", c)
			}
			if r.check != nil {
				r.check(e, res)
			}
		})
	}
}

// terminatedAfter starts kubeboot, sends it SIGTERM after delay unless it
// has ended, and returns how it ended; took counts from the signal.
func terminatedAfter(e env, args []string, delay time.Duration) result {
	e.t.Helper()
	cmd, stdout, stderr := command(e.t.Context(), e.dir, args...)
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	start := time.Now()
	select {
	case err := <-done:
		return finish(e.t, cmd, err, stdout, stderr, time.Since(start))
	case <-time.After(delay):
	}
	start = time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		e.t.Fatal(err)
	}
	return finish(e.t, cmd, <-done, stdout, stderr, time.Since(start))
}

// concurrentInit starts init, waits until it holds the node lock, runs a
// second init with the same arguments and returns how that one ended. The
// first must name its pid in the second's message, and succeed.
func concurrentInit(e env, args []string) result {
	e.t.Helper()
	return lockHeld(e, args, args)
}
