package hostile

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/pki"
)

// Issue 27's classes 3 (writing onto what is not a regular file), 7 (the
// owner of kubeboot's files), 8 (the node lock) and 9 (the exit code of a
// malformed discovery file or bundle).

// nodeLock is where init keeps the node lock under --root.
const nodeLock = "/run/kubeboot/lock"

// stranger is a user other than root, who must not keep kubeboot's files.
const stranger = 1000

// bundleKey writes a bundle key file and returns its path.
func bundleKey(e env) string {
	writeFile(e.t, e.path("k.hex"), strings.Repeat("ab", 32)+"\n", 0o600)
	return e.path("k.hex")
}

// mknodNull makes a character device like /dev/null at path.
func mknodNull(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mknod(path, syscall.S_IFCHR|0o600, 1<<8|3); err != nil {
		t.Fatalf("mknod (the suite runs as root): %v", err)
	}
}

// symlink makes a symbolic link, failing the test if it cannot.
func symlink(t *testing.T, target, path string) {
	t.Helper()
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

// exportOnto is a row: certs export --out onto what plant makes at
// <dir>/target, which must stay as it is.
func exportOnto(name, kind string, plant func(e env, path string)) row {
	return row{
		defect: "27.3", name: "certs export --out onto " + name + " is refused",
		setup: func(e env) []string {
			e.initNode()
			plant(e, e.path("target"))
			return []string{"certs", "export", "--root", e.node, "--out", e.path("target"), "--key-file", bundleKey(e)}
		},
		code: 2, message: "/target: it is " + kind,
		check: func(e env, res result) {
			if !strings.Contains(res.stderr, "error: --out "+e.path("target")) {
				e.t.Errorf("the refusal does not name --out: %s", res.stderr)
			}
		},
	}
}

// owned are node paths kubeboot owns, files and directories.
var owned = []string{"/etc/kubernetes/pki/ca.key", "/etc/kubernetes/pki", "/etc/kubernetes/admin.conf", "/etc/kubernetes/manifests/kube-apiserver.yaml", "/etc/kubernetes/manifests"}

// giveAway hands the owned paths to the stranger.
func giveAway(e env) {
	for _, p := range owned {
		if err := os.Lchown(filepath.Join(e.node, p), stranger, stranger); err != nil {
			e.t.Fatal(err)
		}
	}
}

// ownersAre checks that every owned path belongs to uid.
func ownersAre(e env, uid int) {
	for _, p := range owned {
		info, err := os.Lstat(filepath.Join(e.node, p))
		if err != nil {
			e.t.Fatal(err)
		}
		if st := info.Sys().(*syscall.Stat_t); int(st.Uid) != uid || int(st.Gid) != uid {
			e.t.Errorf("%s belongs to %d:%d, want %d:%d", p, st.Uid, st.Gid, uid, uid)
		}
	}
}

// discoveryFile writes a discovery kubeconfig with the given server, CA
// and token and returns its path.
func discoveryFile(e env, server string, ca []byte, token string) string {
	data, err := pki.DiscoveryKubeconfig("kubernetes", server, ca, token)
	if err != nil {
		e.t.Fatal(err)
	}
	writeFile(e.t, e.path("discovery.conf"), string(data), 0o600)
	return e.path("discovery.conf")
}

// clusterCA is a CA certificate for a discovery file.
func clusterCA(e env) []byte {
	ca, err := pki.NewCA(pki.CertSpec{Name: config.CertCA, CN: "kubernetes", Usage: pki.UsageCA, Algorithm: config.ECDSAP256, Validity: time.Hour})
	if err != nil {
		e.t.Fatal(err)
	}
	return ca.Cert
}

// lockHeld runs init with args while another init with firstArgs holds
// the node lock, and returns how the second ended; the first must succeed.
func lockHeld(e env, firstArgs, args []string) result {
	e.t.Helper()
	first, _, firstErr := command(e.t.Context(), e.dir, firstArgs...)
	if err := first.Start(); err != nil {
		e.t.Fatal(err)
	}
	lock := filepath.Join(e.node, nodeLock)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if data, err := os.ReadFile(lock); err == nil && len(data) > 0 {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatal("the first init never took the node lock")
		}
	}
	second := run(e.t, e.dir, args...)
	if want := "another kubeboot (pid " + strconv.Itoa(first.Process.Pid) + ", kubeboot init"; !strings.Contains(second.stderr, want) {
		e.t.Errorf("the second init does not name the first: %q lacks %q", second.stderr, want)
	}
	if err := first.Wait(); err != nil {
		e.t.Errorf("the first init failed: %v: %s", err, firstErr)
	}
	return second
}

var targetRows = []row{
	exportOnto("a FIFO", "a FIFO", func(e env, path string) { mkfifo(e.t, path) }),
	exportOnto("a character device", "a character device", func(e env, path string) { mknodNull(e.t, path) }),
	exportOnto("a symlink to /proc/self/fd/1", "a symbolic link", func(e env, path string) { symlink(e.t, "/proc/self/fd/1", path) }),
	exportOnto("a symlink to a device", "a symbolic link", func(e env, path string) {
		mknodNull(e.t, e.path("null"))
		symlink(e.t, e.path("null"), path)
	}),
	exportOnto("a directory", "a directory", func(e env, path string) {
		if err := os.Mkdir(path, 0o755); err != nil {
			e.t.Fatal(err)
		}
	}),
	{
		defect: "27.3", name: "certs export --out - writes the bundle to stdout",
		setup: func(e env) []string {
			e.initNode()
			return []string{"certs", "export", "--root", e.node, "--out", "-", "--key-file", bundleKey(e)}
		},
		code: 0, message: "wrote the bundle to stdout",
		check: func(e env, res result) {
			if len(res.stdout) == 0 {
				e.t.Error("nothing on stdout")
			}
		},
	},
	{
		defect: "27.3", name: "certs export --out - without --key-file is refused",
		setup: func(e env) []string {
			e.initNode()
			return []string{"certs", "export", "--root", e.node, "--out", "-"}
		},
		code: 2, message: "pass the key with --key-file",
	},
	{
		defect: "27.3", name: "token create --discovery-file onto a FIFO is refused before any token",
		setup: func(e env) []string {
			mkfifo(e.t, e.path("d.conf"))
			return []string{"token", "create", "--discovery-file", e.path("d.conf")}
		},
		code: 2, message: "d.conf: it is a FIFO",
		check: func(e env, res result) {
			if !strings.Contains(res.stderr, "error: --discovery-file "+e.path("d.conf")) {
				e.t.Errorf("the refusal does not name --discovery-file: %s", res.stderr)
			}
		},
	},
	{
		defect: "27.3", name: "init never replaces a FIFO where the kubelet's config goes",
		setup: func(e env) []string {
			mkfifo(e.t, filepath.Join(e.node, "/var/lib/kubelet/config.yaml"))
			return append([]string{"init", "--root", e.node}, skip...)
		},
		// What init wrote before it came to the kubelet's config may change.
		code: 2, message: "/var/lib/kubelet/config.yaml is a FIFO (named pipe), where kubeboot writes a regular file", allowed: []string{"/node"},
		check: func(e env, _ result) {
			if m := mode(e.t, filepath.Join(e.node, "/var/lib/kubelet/config.yaml")); m&os.ModeNamedPipe == 0 {
				e.t.Errorf("config.yaml is %v, want the FIFO", m)
			}
		},
	},
	{
		defect: "27.7", name: "init takes back the files and directories another user owns",
		setup: func(e env) []string {
			e.initNode()
			giveAway(e)
			return append([]string{"init", "--root", e.node}, skip...)
		},
		code: 0, message: "set the owner of /etc/kubernetes/pki/ca.key to 0:0 (was 1000:1000)", allowed: []string{"/node"},
		check: func(e env, _ result) { ownersAre(e, 0) },
	},
	{
		defect: "27.7", name: "init --dry-run says it would take them back, and does not",
		setup: func(e env) []string {
			e.initNode()
			giveAway(e)
			return []string{"init", "--root", e.node, "--dry-run"}
		},
		code: 0, message: "would set the owner of /etc/kubernetes/pki to 0:0 (now 1000:1000)",
		check: func(e env, _ result) { ownersAre(e, stranger) },
	},
	{
		defect: "27.8", name: "two inits whose configs differ only in paths.kubeconfigDir exclude each other",
		setup: func(e env) []string {
			e.config("b.yaml", "certificates: {keyAlgorithm: rsa-3072}\npaths: {kubeconfigDir: /var/lib/kubeboot-b}\n")
			return append([]string{"init", "--root", e.node, "--config", e.config("a.yaml", "certificates: {keyAlgorithm: rsa-3072}\n")}, skip...)
		},
		run: func(e env, args []string) result {
			second := append([]string{"init", "--root", e.node, "--config", e.path("b.yaml")}, skip...)
			return lockHeld(e, args, second)
		},
		code: 1, message: "is changing this node", within: 5 * time.Second, allowed: []string{"/node"},
		check: func(e env, _ result) {
			if _, err := os.Stat(filepath.Join(e.node, "/var/lib/kubeboot-b")); err == nil {
				e.t.Error("the refused init wrote its kubeconfig dir")
			}
		},
	},
	{
		defect: "27.8", name: "a hard link at the lock path is never written",
		setup: func(e env) []string {
			writeFile(e.t, e.path("outside"), "keep", 0o644)
			if err := os.MkdirAll(filepath.Join(e.node, filepath.Dir(nodeLock)), 0o755); err != nil {
				e.t.Fatal(err)
			}
			if err := os.Link(e.path("outside"), filepath.Join(e.node, nodeLock)); err != nil {
				e.t.Fatal(err)
			}
			return append([]string{"init", "--root", e.node}, skip...)
		},
		code: 2, message: "it has 2 hard links",
	},
	{
		defect: "27.8", name: "a symlink on the lock's way stays inside --root",
		setup: func(e env) []string {
			if err := os.MkdirAll(e.path("away"), 0o755); err != nil {
				e.t.Fatal(err)
			}
			if err := os.MkdirAll(e.node, 0o755); err != nil {
				e.t.Fatal(err)
			}
			symlink(e.t, e.path("away"), filepath.Join(e.node, "run"))
			return append([]string{"init", "--root", e.node}, skip...)
		},
		code: 0, allowed: []string{"/node"},
	},
	{
		defect: "27.9", name: "a discovery file with an http:// server",
		setup: func(e env) []string {
			return []string{"join", "--discovery-file", discoveryFile(e, "http://127.0.0.1:1", clusterCA(e), "abcdef.0123456789abcdef")}
		},
		code: 2, message: "want an https:// URL: write it with `kubeboot token create --discovery-file FILE`",
	},
	{
		defect: "27.9", name: "a discovery file without a CA",
		setup: func(e env) []string {
			return []string{"join", "--discovery-file", discoveryFile(e, "https://127.0.0.1:1", nil, "abcdef.0123456789abcdef")}
		},
		code: 2, message: "embeds none (certificate-authority-data)",
	},
	{
		defect: "27.9", name: "a discovery file with a malformed token",
		setup: func(e env) []string {
			return []string{"join", "--discovery-file", discoveryFile(e, "https://127.0.0.1:1", clusterCA(e), "not-a-token")}
		},
		code: 2, message: "user.token): not a bootstrap token",
	},
	{
		defect: "27.9", name: "a discovery file that is a FIFO",
		setup: func(e env) []string {
			mkfifo(e.t, e.path("d.conf"))
			return []string{"join", "--discovery-file", e.path("d.conf")}
		},
		code: 2, message: "not a regular file: it is a FIFO", within: 10 * time.Second,
	},
}

// TestTargets runs the rows of classes 3, 7, 8 and 9.
func TestTargets(t *testing.T) { runRows(t, targetRows) }
