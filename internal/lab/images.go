package lab

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/kubeboot/kubeboot/internal/imagebundle"
)

// The images a lab node holds besides its static pods' and its addons'
// (all built from <bin dir>, at the tags kubeadm v1.36 pins): the pause
// image containerd runs each pod's sandbox from, and agnhost, the workload
// image of Kubernetes' own end-to-end tests.
const (
	SandboxImage = "registry.k8s.io/pause:3.10.2"
	AgnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"
)

// Image is one image the lab builds: its reference and, by path inside the
// image, the host files it holds.
type Image struct {
	Ref string
	// Trees are directories on this machine, each laid down as one layer
	// (modes, owners, symbolic and hard links kept), the first lowest.
	Trees []string
	// Files maps an absolute path in the image to a file on this machine,
	// in one layer above the trees.
	Files map[string]string
	// Entrypoint and Cmd are the image's default command and its
	// arguments; pods of the control plane name theirs.
	Entrypoint, Cmd []string
	// User is the user the image's processes run as ("" for root).
	User string
}

// rootBinaries are kept at the image's root, with the binary as the
// entrypoint, as in the images registry.k8s.io serves; Kubernetes' and
// etcd's binaries go to /usr/local/bin. pause, at the root too, runs as
// 65535 as upstream's does.
var rootBinaries = []string{"coredns"}

// agnhostImage is agnhost's image as registry.k8s.io serves it: BusyBox's
// tree (<bin dir>/rootfs/busybox) and the tools Kubernetes' tests run in
// agnhost's pods (<bin dir>/rootfs/agnhost: curl, dig, nc, ip, ss, bash, getent,
// with /agnhost-2, /uploads and the porter's certificate), then /agnhost as
// the entrypoint, `pause` its default argument.
func agnhostImage(binDir, ref, path string) (Image, error) {
	trees := []string{filepath.Join(binDir, "rootfs/busybox"), filepath.Join(binDir, "rootfs/agnhost")}
	for _, tree := range trees {
		if _, err := os.Stat(tree); err != nil {
			return Image{}, fmt.Errorf("lab image %q: no %s (run `make lab-binaries`): %w", ref, tree, err)
		}
	}
	return Image{Ref: ref, Trees: trees, Files: map[string]string{"/agnhost": path},
		Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}}, nil
}

// busyboxImage is BusyBox's image as Docker Hub serves it: BusyBox's tree
// (<bin dir>/rootfs/busybox) alone, `sh` its default command.
func busyboxImage(binDir, ref string) (Image, error) {
	tree := filepath.Join(binDir, "rootfs/busybox")
	if _, err := os.Stat(tree); err != nil {
		return Image{}, fmt.Errorf("lab image %q: no %s (run `make lab-binaries`): %w", ref, tree, err)
	}
	return Image{Ref: ref, Trees: []string{tree}, Cmd: []string{"sh"}}, nil
}

// localPathProvisioner is the binary of rancher's local-path-provisioner,
// which its image holds in /usr/bin and runs by name from the PATH.
const localPathProvisioner = "local-path-provisioner"

// ResolveImage maps an image reference of the lab to the binary it runs:
// the repository's last element names the binary, looked up in
// <bin dir>/v<major>.<minor>/ for a tag of that minor version (v1.35/ for
// kube-proxy:v1.35.4, v1.13/ for coredns:v1.13.1), else in the bin dir. A
// Kubernetes or CoreDNS binary must report the tag's version, so a lab
// never runs one version under another's name. kube-proxy's image also
// holds the host's nft (see nftFiles). A busybox image is BusyBox's tree
// (see busyboxImage), and local-path-provisioner's holds the binary where
// upstream's does, /usr/bin, with its name as the command. flannel's two
// images are laid as flannelImage and flannelPluginImage say, and
// kube-router's as kubeRouterImage says.
func ResolveImage(binDir, ref string) (Image, error) {
	parsed, err := name.ParseReference(ref, name.WithDefaultRegistry(""))
	if err != nil {
		return Image{}, fmt.Errorf("lab image %q: %w", ref, err)
	}
	repo := parsed.Context().RepositoryStr()
	binary := repo[strings.LastIndex(repo, "/")+1:]
	tag := parsed.Identifier()
	switch binary {
	case "busybox":
		return busyboxImage(binDir, ref)
	case flannelRepo:
		return flannelImage(binDir, ref, tag)
	case flannelPluginRepo:
		return flannelPluginImage(binDir, ref)
	case kubeRouterRepo:
		return kubeRouterImage(binDir, ref, tag)
	}
	path := filepath.Join(binDir, binary)
	if dir := minorDir(tag); dir != "" {
		if _, err := os.Stat(filepath.Join(binDir, dir, binary)); err == nil {
			path = filepath.Join(binDir, dir, binary)
		}
	}
	if _, err := os.Stat(path); err != nil {
		return Image{}, fmt.Errorf("lab image %q: no binary %s in %s (run `make lab-binaries`): %w", ref, binary, binDir, err)
	}
	if err := checkVersion(binary, path, tag); err != nil {
		return Image{}, fmt.Errorf("lab image %q: %w", ref, err)
	}
	if binary == "agnhost" {
		return agnhostImage(binDir, ref, path)
	}
	if binary == localPathProvisioner {
		return Image{Ref: ref, Files: map[string]string{"/usr/bin/" + binary: path}, Cmd: []string{binary}}, nil
	}
	if binary == "pause" {
		// As upstream's, it runs as 65535, whom kubeboot's own pods,
		// started from it, override.
		return Image{Ref: ref, Files: map[string]string{"/pause": path}, Entrypoint: []string{"/pause"}, User: "65535:65535"}, nil
	}
	if slices.Contains(rootBinaries, binary) {
		return Image{Ref: ref, Files: map[string]string{"/" + binary: path}, Entrypoint: []string{"/" + binary}}, nil
	}
	img := Image{Ref: ref, Files: map[string]string{"/usr/local/bin/" + binary: path}}
	if binary == "kube-proxy" {
		nft, err := nftFiles()
		if err != nil {
			return Image{}, fmt.Errorf("lab image %q: %w", ref, err)
		}
		maps.Copy(img.Files, nft)
	}
	return img, nil
}

// minorDir is the bin dir's subdirectory for a version tag: "v1.35" for
// "v1.35.4", "" for a tag that is no such version.
func minorDir(tag string) string {
	parts := strings.SplitN(strings.TrimPrefix(tag, "v"), ".", 3)
	if !strings.HasPrefix(tag, "v") || len(parts) != 3 {
		return ""
	}
	return "v" + parts[0] + "." + parts[1]
}

// checkVersion asks a Kubernetes binary (`--version`: "Kubernetes
// v1.36.3"), CoreDNS (`-version`: "CoreDNS-1.14.2") or
// local-path-provisioner (`--version`: "local-path-provisioner version
// v0.0.30", as build.sh stamps it) for its version and wants the tag's.
// Other binaries are not checked.
func checkVersion(binary, path, tag string) error {
	var flag, want string
	switch {
	case strings.HasPrefix(binary, "kube-"), binary == localPathProvisioner:
		flag, want = "--version", tag
	case binary == "coredns":
		flag, want = "-version", "CoreDNS-"+strings.TrimPrefix(tag, "v")
	default:
		return nil
	}
	out, err := exec.Command(path, flag).Output()
	if err != nil {
		return fmt.Errorf("run %s %s: %w", path, flag, err)
	}
	if !slices.Contains(strings.Fields(string(out)), want) {
		return fmt.Errorf("%s is %s, not %s (see test/tools/build.sh)", path, strings.TrimSpace(string(out)), tag)
	}
	return nil
}

// WriteArchive writes the images to one new archive at path, kubeboot's
// image bundle (package imagebundle), which `kubeboot images import` and
// `ctr images import` load. The same images always give the same bytes.
func WriteArchive(path string, images []Image) error {
	built := map[string]v1.Image{}
	for _, img := range images {
		var err error
		if built[img.Ref], err = build(img); err != nil {
			return fmt.Errorf("build lab image %q: %w", img.Ref, err)
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create image archive: %w", err)
	}
	_, err = imagebundle.WriteImages(context.Background(), f, built, "")
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return fmt.Errorf("write image archive %q: %w", path, err)
	}
	return nil
}

// archiveFormat names the archives' format in archiveKey: a new format
// makes new names, so that no store of the cache preloaded from an older
// one (a `docker save` archive, before kubeboot's image bundle) is taken
// for one.
const archiveFormat = "imagebundle/1"

// archiveKey fingerprints what an archive, and so its preloaded store, is
// built from.
func archiveKey(images []Image) (string, error) {
	var b strings.Builder
	fmt.Fprintln(&b, archiveFormat)
	for _, img := range images {
		fmt.Fprintf(&b, "%s %q %q %q\n", img.Ref, img.Entrypoint, img.Cmd, img.User)
		for _, tree := range img.Trees {
			err := filepath.WalkDir(tree, func(path string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				info, err := d.Info()
				if err != nil {
					return err
				}
				fmt.Fprintf(&b, "%s %v %d %d\n", path, info.Mode(), info.Size(), info.ModTime().UnixNano())
				return nil
			})
			if err != nil {
				return "", fmt.Errorf("lab image %q: %w", img.Ref, err)
			}
		}
		for _, dest := range sortedKeys(img.Files) {
			info, err := os.Stat(img.Files[dest])
			if err != nil {
				return "", fmt.Errorf("lab image %q: %w", img.Ref, err)
			}
			fmt.Fprintf(&b, "%s %s %d %d\n", dest, img.Files[dest], info.Size(), info.ModTime().UnixNano())
		}
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:8]), nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// build makes the image, for this machine's platform: a layer per tree,
// then one of the files.
func build(img Image) (v1.Image, error) {
	var layers []v1.Layer
	for _, tree := range img.Trees {
		layer, err := storedLayer(func() io.ReadCloser { return treeTar(tree) })
		if err != nil {
			return nil, err
		}
		layers = append(layers, layer)
	}
	if len(img.Files) > 0 || len(img.Trees) == 0 {
		layer, err := storedLayer(func() io.ReadCloser { return layerTar(img.Files) })
		if err != nil {
			return nil, err
		}
		layers = append(layers, layer)
	}
	out, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, err
	}
	cfg, err := out.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cfg.Config.Entrypoint, cfg.Config.Cmd, cfg.Config.User = img.Entrypoint, img.Cmd, img.User
	return mutate.ConfigFile(out, cfg)
}

// storedLayer is a layer of the tar stream open gives, stored, not
// compressed: the archive stays on this machine, and compressing the
// binaries (and unpacking them again in each node's containerd) would take
// most of an import's time.
func storedLayer(open func() io.ReadCloser) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return open(), nil },
		tarball.WithCompressionLevel(gzip.NoCompression))
}

// treeTar streams the layer of a directory tree: every directory, file and
// symbolic link under it with its mode and owner, and a file that is a
// hard link of one already written as that link.
func treeTar(tree string) io.ReadCloser {
	r, w := io.Pipe()
	go func() {
		tw := tar.NewWriter(w)
		err := writeTree(tw, tree)
		if err == nil {
			err = tw.Close()
		}
		_ = w.CloseWithError(err)
	}()
	return r
}

func writeTree(tw *tar.Writer, tree string) error {
	written := map[uint64]string{} // inode -> the name it was written as
	return filepath.WalkDir(tree, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == tree {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if d.Type()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(tree, path)
		hdr.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}, time.Time{}
		st, _ := info.Sys().(*syscall.Stat_t)
		if info.Mode().IsRegular() && st != nil && st.Nlink > 1 {
			if first, ok := written[st.Ino]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				return tw.WriteHeader(hdr)
			}
			written[st.Ino] = hdr.Name
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		_, err = io.Copy(tw, f)
		return err
	})
}

// layerTar streams the layer: the files' parent directories, a /tmp, and
// the files, each executable.
func layerTar(files map[string]string) io.ReadCloser {
	r, w := io.Pipe()
	go func() {
		tw := tar.NewWriter(w)
		err := writeLayer(tw, files)
		if err == nil {
			err = tw.Close()
		}
		_ = w.CloseWithError(err)
	}()
	return r
}

func writeLayer(tw *tar.Writer, files map[string]string) error {
	dirs := map[string]bool{}
	dir := func(p string, mode int64) error {
		if dirs[p] {
			return nil
		}
		dirs[p] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: mode})
	}
	if err := dir("tmp", 0o1777); err != nil {
		return err
	}
	for _, dest := range sortedKeys(files) {
		rel := strings.TrimPrefix(dest, "/")
		parts := strings.Split(rel, "/")
		for i := 1; i < len(parts); i++ {
			if err := dir(strings.Join(parts[:i], "/"), 0o755); err != nil {
				return err
			}
		}
		if err := addFile(tw, rel, files[dest]); err != nil {
			return err
		}
	}
	return nil
}

func addFile(tw *tar.Writer, rel, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s: %w", src, fs.ErrInvalid)
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o755, Size: info.Size()}); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}
