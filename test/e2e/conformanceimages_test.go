//go:build e2e && conformance

package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kubeboot/kubeboot/internal/lab"
)

// conformanceImages are the images Kubernetes' conformance tests run
// besides the lab's own (pause and agnhost 2.63.0), built here as
// registry.k8s.io's are laid out (test/utils/image/manifest.go of v1.36.3
// names them), from the trees and binaries `make conformance` builds
// (test/tools/build.sh --conformance). agnhost 2.55 is the lab's agnhost
// under the older tag: the tests that run it (a Deployment's and a
// StatefulSet's image change) only need another tag of a working agnhost.
func conformanceImages(t *testing.T) []lab.Image {
	t.Helper()
	const e2eRegistry = "registry.k8s.io/e2e-test-images/"
	tree := func(name string) string {
		path := filepath.Join(binDir, "rootfs", name)
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("the conformance images need %s: run `make conformance` (test/tools/build.sh --conformance)", path)
		}
		return path
	}
	bin := func(name string) string {
		path := filepath.Join(binDir, name)
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("the conformance images need %s: run `make conformance` (test/tools/build.sh --conformance)", path)
		}
		return path
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	// files writes a tree of the given files (path: content, mode) for one
	// image's own layer.
	files := func(list map[string]struct {
		content string
		mode    os.FileMode
	}) string {
		dir := t.TempDir()
		for path, f := range list {
			must(os.MkdirAll(filepath.Join(dir, filepath.Dir(path)), 0o755))
			must(os.WriteFile(filepath.Join(dir, path), []byte(f.content), f.mode))
			must(os.Chmod(filepath.Join(dir, path), f.mode)) // past the umask
		}
		return dir
	}
	type file = struct {
		content string
		mode    os.FileMode
	}
	agnhost, err := lab.ResolveImage(binDir, lab.AgnhostImage)
	if err != nil {
		t.Fatal(err)
	}
	agnhostPrev := agnhost
	agnhostPrev.Ref = e2eRegistry + "agnhost:2.55"
	nnp, err := os.ReadFile(bin("nnp"))
	if err != nil {
		t.Fatal(err)
	}
	busybox := tree("busybox")
	return []lab.Image{
		agnhostPrev,
		{Ref: e2eRegistry + "busybox:1.37.0-1", Trees: []string{busybox}, Cmd: []string{"sh"}},
		{Ref: e2eRegistry + "nginx:1.15-4", Trees: []string{busybox, tree("nginx")}, Cmd: []string{"nginx", "-g", "daemon off;"}},
		{Ref: e2eRegistry + "glibc-dns-testing:2.0.0", Trees: []string{tree("glibc-dns-testing")}, Cmd: []string{"sh"}},
		// The Update Demo's web server: agnhost's test-webserver serving
		// data.json, which names the image's picture.
		{Ref: e2eRegistry + "nautilus:1.8", Trees: append(append([]string{}, agnhost.Trees...), files(map[string]file{
			"data.json":    {`{"image": "nautilus.jpg"}` + "\n", 0o644},
			"nautilus.jpg": {"a nautilus\n", 0o644},
		})), Files: agnhost.Files, Entrypoint: agnhost.Entrypoint, Cmd: []string{"test-webserver"}},
		// nnp setuid and setgid root: it prints the user it runs as.
		{Ref: e2eRegistry + "nonewprivs:1.4", Trees: []string{busybox, files(map[string]file{
			"usr/local/bin/nnp": {string(nnp), 0o755 | os.ModeSetuid | os.ModeSetgid},
		})}, Cmd: []string{"nnp"}},
		{Ref: e2eRegistry + "nonroot:1.5", Trees: []string{busybox}, User: "1234", Cmd: []string{"sh"}},
		{Ref: e2eRegistry + "sample-apiserver:1.29.2", Trees: []string{busybox},
			Files: map[string]string{"/sample-apiserver": bin("sample-apiserver")}, Entrypoint: []string{"/sample-apiserver"}},
		{Ref: "registry.k8s.io/etcd:3.6.8-0", Trees: []string{busybox},
			Files: map[string]string{"/usr/local/bin/etcd": bin("etcd"), "/usr/local/bin/etcdctl": bin("etcdctl")}},
	}
}
