package lab_test

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/imagebundle"
	"github.com/kubeboot/kubeboot/internal/lab"
)

// writeBinary writes an executable shell script at dir/name that prints
// version for --version.
func writeBinary(t *testing.T, dir, name, version string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho "+version+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestResolveImage(t *testing.T) {
	bin := t.TempDir()
	current := writeBinary(t, bin, "kube-apiserver", "Kubernetes v1.36.3")
	previous := writeBinary(t, filepath.Join(bin, "v1.35"), "kube-apiserver", "Kubernetes v1.35.4")
	etcd := writeBinary(t, bin, "etcd", "etcd Version: 3.6.8")
	pause := writeBinary(t, bin, "pause", "")
	coredns := writeBinary(t, bin, "coredns", "CoreDNS-1.14.2")
	coredns113 := writeBinary(t, filepath.Join(bin, "v1.13"), "coredns", "CoreDNS-1.13.1")
	provisioner := writeBinary(t, bin, "local-path-provisioner", "local-path-provisioner version v0.0.30")

	for _, tc := range []struct {
		ref  string
		want lab.Image
	}{
		{"registry.k8s.io/kube-apiserver:v1.36.3", lab.Image{Files: map[string]string{"/usr/local/bin/kube-apiserver": current}}},
		{"registry.k8s.io/kube-apiserver:v1.35.4", lab.Image{Files: map[string]string{"/usr/local/bin/kube-apiserver": previous}}},
		{"example.com/mirror/etcd:3.6.8-0", lab.Image{Files: map[string]string{"/usr/local/bin/etcd": etcd}}},
		{lab.SandboxImage, lab.Image{Files: map[string]string{"/pause": pause}, Entrypoint: []string{"/pause"}, User: "65535:65535"}},
		{"registry.k8s.io/coredns/coredns:v1.14.2", lab.Image{Files: map[string]string{"/coredns": coredns}, Entrypoint: []string{"/coredns"}}},
		{"registry.k8s.io/coredns/coredns:v1.13.1", lab.Image{Files: map[string]string{"/coredns": coredns113}, Entrypoint: []string{"/coredns"}}},
		{lab.LocalPathProvisionerImage, lab.Image{Files: map[string]string{"/usr/bin/local-path-provisioner": provisioner}, Cmd: []string{"local-path-provisioner"}}},
	} {
		got, err := lab.ResolveImage(bin, tc.ref)
		if err != nil {
			t.Errorf("ResolveImage(%s): %v", tc.ref, err)
			continue
		}
		tc.want.Ref = tc.ref
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ResolveImage(%s) (-want +got):\n%s", tc.ref, diff)
		}
	}

	// A tag no binary has: the bin dir's own kube-apiserver is v1.36.3.
	_, err := lab.ResolveImage(bin, "registry.k8s.io/kube-apiserver:v1.34.0")
	if err == nil || !strings.Contains(err.Error(), "not v1.34.0") {
		t.Errorf("a version no binary has: %v", err)
	}
	// Likewise CoreDNS: the bin dir's own is v1.14.2.
	_, err = lab.ResolveImage(bin, "registry.k8s.io/coredns/coredns:v1.12.1")
	if err == nil || !strings.Contains(err.Error(), "is CoreDNS-1.14.2, not v1.12.1") {
		t.Errorf("a CoreDNS version no binary has: %v", err)
	}
	// A binary in the tag's directory that is another version.
	writeBinary(t, filepath.Join(bin, "v1.12"), "coredns", "CoreDNS-1.13.1")
	_, err = lab.ResolveImage(bin, "registry.k8s.io/coredns/coredns:v1.12.1")
	if err == nil || !strings.Contains(err.Error(), "is CoreDNS-1.13.1, not v1.12.1") {
		t.Errorf("a CoreDNS binary of another version: %v", err)
	}
	// And the provisioner: the bin dir's is v0.0.30.
	_, err = lab.ResolveImage(bin, "docker.io/rancher/local-path-provisioner:v0.0.29")
	if err == nil || !strings.Contains(err.Error(), "is local-path-provisioner version v0.0.30, not v0.0.29") {
		t.Errorf("a local-path-provisioner version no binary has: %v", err)
	}
	_, err = lab.ResolveImage(bin, "registry.k8s.io/kube-scheduler:v1.36.3")
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "make lab-binaries") {
		t.Errorf("a missing binary: %v", err)
	}
}

// TestAgnhostImage: agnhost's image is laid out as registry.k8s.io's, on
// BusyBox's tree and the tests' tools, /agnhost its entrypoint and `pause`
// its default argument; without the trees, it names the fix.
func TestAgnhostImage(t *testing.T) {
	bin := t.TempDir()
	agnhost := writeBinary(t, bin, "agnhost", "")
	_, err := lab.ResolveImage(bin, lab.AgnhostImage)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "rootfs/busybox (run `make lab-binaries`)") {
		t.Errorf("without BusyBox's tree: %v", err)
	}
	for _, tree := range []string{"rootfs/busybox", "rootfs/agnhost"} {
		if err := os.MkdirAll(filepath.Join(bin, tree), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got, err := lab.ResolveImage(bin, lab.AgnhostImage)
	if err != nil {
		t.Fatal(err)
	}
	want := lab.Image{Ref: lab.AgnhostImage, Trees: []string{filepath.Join(bin, "rootfs/busybox"), filepath.Join(bin, "rootfs/agnhost")},
		Files: map[string]string{"/agnhost": agnhost}, Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("agnhost's image (-want +got):\n%s", diff)
	}
}

// TestBusyboxImage: the busybox image of the provisioner's helper pods is
// BusyBox's tree alone, `sh` its command, as Docker Hub's; without the
// tree, it names the fix.
func TestBusyboxImage(t *testing.T) {
	bin := t.TempDir()
	_, err := lab.ResolveImage(bin, lab.BusyboxImage)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "rootfs/busybox (run `make lab-binaries`)") {
		t.Errorf("without BusyBox's tree: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(bin, "rootfs/busybox"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := lab.ResolveImage(bin, lab.BusyboxImage)
	if err != nil {
		t.Fatal(err)
	}
	want := lab.Image{Ref: lab.BusyboxImage, Trees: []string{filepath.Join(bin, "rootfs/busybox")}, Cmd: []string{"sh"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("busybox's image (-want +got):\n%s", diff)
	}
}

// TestArchiveTrees: a tree becomes a layer of its own below the files',
// with every mode (setuid included), symbolic link and hard link kept and
// root as the owner; the image's command and user are its config's; a
// changed file of a tree changes the archive's key, and so its store's.
func TestArchiveTrees(t *testing.T) {
	requireRoot(t, "a tree of root's files, as build.sh's are,")
	tree, bin, cache := t.TempDir(), t.TempDir(), t.TempDir()
	for path, mode := range map[string]os.FileMode{"bin/busybox": 0o755, "etc/passwd": 0o644, "usr/local/bin/nnp": 0o755 | os.ModeSetuid | os.ModeSetgid} {
		if err := os.MkdirAll(filepath.Join(tree, filepath.Dir(path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tree, path), []byte(path), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(tree, path), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(tree, "bin/busybox"), filepath.Join(tree, "bin/sh")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("busybox", filepath.Join(tree, "bin/ls")); err != nil {
		t.Fatal(err)
	}
	img := lab.Image{Ref: "registry.k8s.io/e2e-test-images/nonewprivs:1.4", Trees: []string{tree},
		Files: map[string]string{"/usr/local/bin/tool": writeBinary(t, bin, "tool", "")}, Cmd: []string{"nnp"}, User: "1000"}
	path := filepath.Join(cache, "images.tar")
	if err := lab.WriteArchive(path, []lab.Image{img}); err != nil {
		t.Fatal(err)
	}
	key, err := lab.ArchiveKey([]lab.Image{img})
	if err != nil {
		t.Fatal(err)
	}
	got := bundleImages(t, path)[img.Ref]
	cfg, err := got.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"nnp"}, cfg.Config.Cmd); diff != "" || cfg.Config.User != "1000" || cfg.Config.Entrypoint != nil {
		t.Errorf("config: cmd %q (%s), user %q, entrypoint %q", cfg.Config.Cmd, diff, cfg.Config.User, cfg.Config.Entrypoint)
	}
	layers, err := got.Layers()
	if err != nil || len(layers) != 2 {
		t.Fatalf("%d layers, %v; want the tree's and the files'", len(layers), err)
	}
	headers := layerHeaders(t, layers[0].Uncompressed)
	for entry, want := range map[string]int64{"bin/": 0o755, "bin/busybox": 0o755, "etc/passwd": 0o644, "usr/local/bin/nnp": 0o6755} {
		if h := headers[entry]; h == nil || h.Mode&0o7777 != want || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s in the tree's layer: %+v, want mode %o owned by root", entry, h, want)
		}
	}
	if h := headers["bin/sh"]; h == nil || h.Typeflag != tar.TypeLink || h.Linkname != "bin/busybox" {
		t.Errorf("the hard link bin/sh: %+v", h)
	}
	if h := headers["bin/ls"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox" {
		t.Errorf("the symbolic link bin/ls: %+v", h)
	}
	if entries := layerEntries(t, layers[1].Uncompressed); entries["usr/local/bin/tool"] != 0o755 {
		t.Errorf("the files' layer: %v", entries)
	}

	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(tree, "etc/passwd"), later, later); err != nil {
		t.Fatal(err)
	}
	if again, err := lab.ArchiveKey([]lab.Image{img}); err != nil || again == key {
		t.Errorf("after a file of the tree changed: key %s, %v; want a new one", again, err)
	}
}

// TestKubeProxyImage: kube-proxy's image holds the host's nft, which its
// nftables mode runs, with every library it loads and the dynamic loader,
// at their paths on the host; without nft on the host, it names the fix.
func TestKubeProxyImage(t *testing.T) {
	nft := lab.HostNft
	if _, err := os.Stat(nft); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("kube-proxy's image needs %s: apt-get install nftables", nft)
		}
		t.Skipf("kube-proxy's image needs %s: apt-get install nftables", nft)
	}
	bin := t.TempDir()
	proxy := writeBinary(t, bin, "kube-proxy", "Kubernetes v1.36.3")
	img, err := lab.ResolveImage(bin, "registry.k8s.io/kube-proxy:v1.36.3")
	if err != nil {
		t.Fatal(err)
	}
	if img.Files["/usr/local/bin/kube-proxy"] != proxy || img.Files[nft] != nft {
		t.Errorf("files = %v, want kube-proxy from %s and %s", img.Files, proxy, nft)
	}
	// nft names protocols from /etc/protocols: without it kube-proxy reads
	// its "tcp" elements back as 6 and deletes them as stale.
	for _, names := range []string{"/etc/protocols", "/etc/services"} {
		if img.Files[names] != names {
			t.Errorf("the image lacks %s", names)
		}
	}
	for dest, src := range img.Files {
		if dest != "/usr/local/bin/kube-proxy" && dest != src {
			t.Errorf("%s in the image is %s on the host, want the same path", dest, src)
		}
	}
	// Every path ldd lists, the loader (nft's program interpreter) and a
	// file named after each library nft needs.
	out, err := exec.Command("ldd", nft).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range strings.Fields(string(out)) {
		if filepath.IsAbs(field) && img.Files[field] != field {
			t.Errorf("ldd lists %s; the image lacks it", field)
		}
	}
	f, err := elf.Open(nft)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	needed, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for dest := range img.Files {
		names[filepath.Base(dest)] = true
	}
	for _, lib := range needed {
		if !names[lib] {
			t.Errorf("nft needs %s; the image lacks it: %v", lib, img.Files)
		}
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			interp, err := io.ReadAll(prog.Open())
			if err != nil {
				t.Fatal(err)
			}
			if loader := strings.TrimRight(string(interp), "\x00"); img.Files[loader] != loader {
				t.Errorf("the image lacks the loader %s", loader)
			}
		}
	}

	if _, err := lab.NftFilesOf(filepath.Join(t.TempDir(), "nft")); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "apt-get install nftables") {
		t.Errorf("without nft: err = %v, want the apt-get install nftables fix", err)
	}
	// Only kube-proxy's image holds nft.
	writeBinary(t, bin, "kube-scheduler", "Kubernetes v1.36.3")
	if img, err := lab.ResolveImage(bin, "registry.k8s.io/kube-scheduler:v1.36.3"); err != nil || len(img.Files) != 1 {
		t.Errorf("kube-scheduler without nft: %v, %v; want only the binary", img.Files, err)
	}
}

// TestArchive builds an archive, a kubeboot image bundle that `kubeboot
// images import` verifies and takes, and reads it back: each reference,
// its platform, environment (a PATH with /usr/sbin, where kube-proxy finds
// nft) and entrypoint, and the files at their paths, executable. The same
// images give the same bytes; a rebuilt binary gives another key.
func TestArchive(t *testing.T) {
	bin, cache := t.TempDir(), t.TempDir()
	images := []lab.Image{
		{Ref: "registry.k8s.io/etcd:3.6.8-0", Files: map[string]string{"/usr/local/bin/etcd": writeBinary(t, bin, "etcd", "etcd")}},
		{Ref: lab.SandboxImage, Files: map[string]string{"/pause": writeBinary(t, bin, "pause", "pause")}, Entrypoint: []string{"/pause"}},
	}
	path := filepath.Join(cache, "images.tar")
	if err := lab.WriteArchive(path, images); err != nil {
		t.Fatal(err)
	}
	read := bundleImages(t, path)
	if len(read) != len(images) {
		t.Errorf("the archive holds %d images, want %d", len(read), len(images))
	}
	for _, img := range images {
		got, ok := read[img.Ref]
		if !ok {
			t.Fatalf("the archive lacks %s", img.Ref)
		}
		cfg, err := got.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.OS != "linux" || cfg.Architecture == "" || !strings.HasPrefix(cfg.Config.Env[0], "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:") {
			t.Errorf("%s: config os %q arch %q env %q", img.Ref, cfg.OS, cfg.Architecture, cfg.Config.Env)
		}
		if diff := cmp.Diff(img.Entrypoint, cfg.Config.Entrypoint); diff != "" {
			t.Errorf("%s: entrypoint (-want +got):\n%s", img.Ref, diff)
		}
		layers, err := got.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: %d layers, %v", img.Ref, len(layers), err)
		}
		entries := layerEntries(t, layers[0].Uncompressed)
		for dest := range img.Files {
			if mode, ok := entries[strings.TrimPrefix(dest, "/")]; !ok || mode != 0o755 {
				t.Errorf("%s: %s in the layer: present %v, mode %o", img.Ref, dest, ok, mode)
			}
		}
		if entries["tmp/"] != 0o1777 {
			t.Errorf("%s: /tmp has mode %o, want 1777", img.Ref, entries["tmp/"])
		}
	}

	// The same images give the same bytes; a rebuilt binary changes the
	// key.
	again := filepath.Join(cache, "again.tar")
	if err := lab.WriteArchive(again, images); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readFile(t, again), readFile(t, path)) {
		t.Error("the same images built again make other bytes")
	}
	key, err := lab.ArchiveKey(images)
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(images[0].Files["/usr/local/bin/etcd"], later, later); err != nil {
		t.Fatal(err)
	}
	if rebuilt, err := lab.ArchiveKey(images); err != nil || rebuilt == key {
		t.Errorf("after the binary changed: key %s, %v; want a new one", rebuilt, err)
	}
}

// layerEntries lists a layer's tar entries with their modes.
func layerEntries(t *testing.T, open func() (io.ReadCloser, error)) map[string]int64 {
	t.Helper()
	entries := map[string]int64{}
	for name, h := range layerHeaders(t, open) {
		entries[name] = h.Mode
	}
	return entries
}

// layerHeaders lists a layer's tar headers by name.
func layerHeaders(t *testing.T, open func() (io.ReadCloser, error)) map[string]*tar.Header {
	t.Helper()
	rc, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	headers := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return headers
		}
		if err != nil {
			t.Fatal(err)
		}
		headers[h.Name] = h
	}
}

// bundleImages verifies the archive at path as `kubeboot images import`
// does (imagebundle.Open, for this machine's platform) and reads its
// images back, by the reference its index names each.
func bundleImages(t *testing.T, path string) map[string]v1.Image {
	t.Helper()
	b, err := imagebundle.Open(path, "")
	if err != nil {
		t.Fatalf("the archive is no image bundle: %v", err)
	}
	_ = b.Close()
	dir := t.TempDir()
	tr := tar.NewReader(bytes.NewReader(readFile(t, path)))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		dest := filepath.Join(dir, filepath.FromSlash(h.Name))
		if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dest, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	index, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]v1.Image{}
	for i, desc := range manifest.Manifests {
		ref := desc.Annotations[imagebundle.AnnotationImageName]
		if ref != b.Images[i].Ref {
			t.Errorf("index entry %d names %q, Open read %q", i, ref, b.Images[i].Ref)
		}
		if images[ref], err = index.Image(desc.Digest); err != nil {
			t.Fatal(err)
		}
	}
	return images
}

// readFile reads a file.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestFlannelImages: flannel's image holds flanneld in /opt/bin, its
// entrypoint, and the host's nft and iptables under
// each name flanneld runs it by, with iptables' extensions; a flanneld of
// another version is refused. The plugin's image is BusyBox's tree with
// the plugin as /flannel.
func TestFlannelImages(t *testing.T) {
	for _, tool := range []string{lab.HostNft, "/usr/sbin/iptables"} {
		if _, err := os.Stat(tool); err != nil {
			t.Fatalf("flannel's image needs %s: `make host-packages`", tool)
		}
	}
	bin := t.TempDir()
	flanneld := filepath.Join(bin, "flanneld")
	// flanneld prints its version to stderr.
	if err := os.WriteFile(flanneld, []byte("#!/bin/sh\necho v0.28.10 >&2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	img, err := lab.ResolveImage(bin, config.DefaultFlannelImage)
	if err != nil {
		t.Fatal(err)
	}
	if img.Files["/opt/bin/flanneld"] != flanneld || img.Files[lab.HostNft] != lab.HostNft ||
		!slices.Equal(img.Entrypoint, []string{"/opt/bin/flanneld"}) {
		t.Errorf("image %+v, want flanneld in /opt/bin and the host's nft", img)
	}
	for _, name := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables"} {
		if img.Files["/usr/sbin/"+name] == "" {
			t.Errorf("the image lacks /usr/sbin/%s", name)
		}
	}
	if !slices.ContainsFunc(slices.Collect(maps.Keys(img.Files)), func(p string) bool { return strings.HasSuffix(p, "/xtables/libxt_comment.so") }) {
		t.Error("the image lacks iptables' extensions (libxt_comment.so)")
	}

	if _, err := lab.ResolveImage(bin, "ghcr.io/flannel-io/flannel:v0.27.0"); err == nil || !strings.Contains(err.Error(), "is v0.28.10, not v0.27.0") {
		t.Errorf("flanneld of another version: %v", err)
	}

	if err := os.MkdirAll(filepath.Join(bin, "rootfs/busybox/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	plugin := writeBinary(t, bin, "flannel-cni-plugin", "")
	img, err = lab.ResolveImage(bin, config.DefaultFlannelPluginImage)
	if err != nil {
		t.Fatal(err)
	}
	if img.Files["/flannel"] != plugin || !slices.Equal(img.Trees, []string{filepath.Join(bin, "rootfs/busybox")}) {
		t.Errorf("plugin image %+v, want BusyBox's tree and /flannel", img)
	}
}

// TestKubeRouterImage: kube-router's image is BusyBox's tree, then the
// tree of its tools, with the binary as its entrypoint; a missing tree
// names build.sh --bench, and a binary of another version is refused.
func TestKubeRouterImage(t *testing.T) {
	bin := t.TempDir()
	// kube-router prints its version to stderr.
	binary := filepath.Join(bin, "kube-router")
	if err := os.WriteFile(binary, []byte("#!/bin/sh\necho \"Running $0 version v2.1.0, built on , go1.26.8\" >&2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(bin, "rootfs/busybox/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	const ref = "docker.io/cloudnativelabs/kube-router:v2.1.0"
	if _, err := lab.ResolveImage(bin, ref); err == nil || !strings.Contains(err.Error(), "rootfs/kube-router") || !strings.Contains(err.Error(), "--bench") {
		t.Errorf("without its tree: %v, want the tree and build.sh --bench named", err)
	}
	if err := os.MkdirAll(filepath.Join(bin, "rootfs/kube-router/usr/sbin"), 0o755); err != nil {
		t.Fatal(err)
	}
	img, err := lab.ResolveImage(bin, ref)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(bin, "rootfs/busybox"), filepath.Join(bin, "rootfs/kube-router")}
	if !slices.Equal(img.Trees, want) || img.Files["/usr/local/bin/kube-router"] != binary || !slices.Equal(img.Entrypoint, []string{"/usr/local/bin/kube-router"}) || img.Cmd != nil {
		t.Errorf("image %+v, want the trees %v and the binary as its entrypoint", img, want)
	}
	if _, err := lab.ResolveImage(bin, "docker.io/cloudnativelabs/kube-router:v2.0.1"); err == nil || !strings.Contains(err.Error(), "not version v2.0.1") {
		t.Errorf("kube-router of another version: %v", err)
	}
}
