package lab

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The repositories' last elements of flannel's two images, which
// addons.cni's flannel runs.
const (
	flannelRepo       = "flannel"
	flannelPluginRepo = "flannel-cni-plugin"
)

// flannelImage is flannel's image as ghcr.io serves it, as far as
// kubeboot's DaemonSet uses it: <bin dir>/flanneld in /opt/bin, where the
// DaemonSet runs it, with the host's nft (see nftFiles), which flanneld
// runs in nftables mode, and iptables (see iptablesFiles). flanneld must
// report the tag's version.
func flannelImage(binDir, ref, tag string) (Image, error) {
	flanneld := filepath.Join(binDir, "flanneld")
	if _, err := os.Stat(flanneld); err != nil {
		return Image{}, fmt.Errorf("lab image %q: no %s (run `make lab-binaries`): %w", ref, flanneld, err)
	}
	out, err := exec.Command(flanneld, "--version").CombinedOutput() // it prints to stderr
	if err != nil {
		return Image{}, fmt.Errorf("lab image %q: run %s --version: %w", ref, flanneld, err)
	}
	if got := strings.TrimSpace(string(out)); got != tag {
		return Image{}, fmt.Errorf("lab image %q: %s is %s, not %s (see test/tools/build.sh)", ref, flanneld, got, tag)
	}
	files := map[string]string{"/opt/bin/flanneld": flanneld}
	for _, tool := range []func() (map[string]string, error){nftFiles, iptablesFiles} {
		tf, err := tool()
		if err != nil {
			return Image{}, fmt.Errorf("lab image %q: %w", ref, err)
		}
		maps.Copy(files, tf)
	}
	return Image{Ref: ref, Files: files, Entrypoint: []string{"/opt/bin/flanneld"}}, nil
}

// flannelPluginImage is the image of flannel's CNI plugin as ghcr.io
// serves it: BusyBox's tree, whose cp the DaemonSet's init container
// runs, and the plugin as /flannel, from <bin dir>/flannel-cni-plugin.
// The lab's plugin is containernetworking/plugins' last flannel plugin
// (see test/tools/cni/flannel), whatever the tag.
func flannelPluginImage(binDir, ref string) (Image, error) {
	img, err := busyboxImage(binDir, ref)
	if err != nil {
		return Image{}, err
	}
	plugin := filepath.Join(binDir, flannelPluginRepo)
	if _, err := os.Stat(plugin); err != nil {
		return Image{}, fmt.Errorf("lab image %q: no %s (run `make lab-binaries`): %w", ref, plugin, err)
	}
	img.Files = map[string]string{"/flannel": plugin}
	return img, nil
}
