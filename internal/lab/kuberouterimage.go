package lab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// kubeRouterRepo is the last element of kube-router's image repository:
// a pod network a lab may run as its own (images, and addons.manifests
// with addons.cni.provider none), as make bench does beside flannel.
const kubeRouterRepo = "kube-router"

// kubeRouterImage is kube-router's image as its project publishes it:
// BusyBox's tree (whose sh its CNI installer runs), then <bin
// dir>/rootfs/kube-router (Debian's ipset, ip and iptables on the
// nftables backend, which it runs), with <bin dir>/kube-router as
// /usr/local/bin/kube-router, the entrypoint. kube-router must report
// the tag's version. build.sh --bench builds both.
func kubeRouterImage(binDir, ref, tag string) (Image, error) {
	img, err := busyboxImage(binDir, ref)
	if err != nil {
		return Image{}, err
	}
	binary, tree := filepath.Join(binDir, kubeRouterRepo), filepath.Join(binDir, "rootfs/kube-router")
	for _, path := range []string{binary, tree} {
		if _, err := os.Stat(path); err != nil {
			return Image{}, fmt.Errorf("lab image %q: no %s (run `bash test/tools/build.sh %s --bench`): %w", ref, path, binDir, err)
		}
	}
	// "Running /path/kube-router version v2.1.0, built on , go1.26.8",
	// on stderr.
	out, err := exec.Command(binary, "--version").CombinedOutput()
	if err != nil {
		return Image{}, fmt.Errorf("lab image %q: run %s --version: %w", ref, binary, err)
	}
	if !strings.Contains(string(out), " version "+tag+",") {
		return Image{}, fmt.Errorf("lab image %q: %s reports %q, not version %s (see test/tools/build.sh)", ref, binary, strings.TrimSpace(string(out)), tag)
	}
	img.Trees = append(img.Trees, tree)
	img.Files = map[string]string{"/usr/local/bin/kube-router": binary}
	img.Entrypoint, img.Cmd = []string{"/usr/local/bin/kube-router"}, nil
	return img, nil
}
