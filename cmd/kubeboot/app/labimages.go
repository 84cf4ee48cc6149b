package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/cri"
	"github.com/kubeboot/kubeboot/lab"
	"github.com/kubeboot/kubeboot/output"
	"github.com/kubeboot/kubeboot/phases"
)

// labImages are the images the lab node needs: its static pods' images,
// kube-proxy's and CoreDNS's (at the version kubeboot pins for the minor)
// for every Kubernetes release in the bin dir (the bin dir's own and each
// v<major>.<minor>/ set), so that an upgrade to another release finds its
// images as a pull would; the sandbox image and agnhost. Those whose
// binary the bin dir lacks are to be pulled, as any node would pull them.
// The CSR approver's default image is built from kubeboot, the running
// binary. cfg is a control-plane node's configuration, nil for a worker,
// which runs no static pods and pulls as kubeadm does.
func labImages(run *phases.Run, cfg *config.ClusterConfiguration, binDir, kubeboot string) (build []lab.Image, pull []string, err error) {
	sets, err := filepath.Glob(filepath.Join(binDir, "v*", "kube-apiserver"))
	if err != nil {
		return nil, nil, err
	}
	refs := []string{lab.SandboxImage, lab.AgnhostImage}
	for _, apiserver := range append([]string{filepath.Join(binDir, "kube-apiserver")}, sets...) {
		version, err := kubernetesVersion(apiserver)
		if err != nil {
			return nil, nil, err
		}
		release := config.ClusterConfiguration{ImageRepository: config.DefaultImageRepository}
		var images []string
		if cfg != nil {
			release = *cfg
			release.KubernetesVersion = version
			if images, err = phases.Images(&phases.Node{Run: run, Config: &release}); err != nil {
				return nil, nil, err
			}
		}
		images = append(images, config.DefaultKubeProxyImage(release.ImageRepository, version))
		if coreDNS := config.DefaultCoreDNSImage(release.ImageRepository, version); !strings.HasSuffix(coreDNS, ":") {
			images = append(images, coreDNS) // else kubeboot pins no CoreDNS for that minor
		}
		for _, ref := range images {
			if !slices.Contains(refs, ref) {
				refs = append(refs, ref)
			}
		}
	}
	for _, ref := range refs {
		if strings.HasPrefix(ref, config.DefaultCSRApproverRepository+":") {
			img, err := lab.KubebootImage(ref, kubeboot)
			if err != nil {
				return nil, nil, err
			}
			build = append(build, img)
			continue
		}
		img, err := lab.ResolveImage(binDir, ref)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			pull = append(pull, ref)
		case err != nil:
			return nil, nil, err
		default:
			build = append(build, img)
		}
	}
	return build, pull, nil
}

// pullLabImages makes the node's containerd pull the images the lab cannot
// build, through the CRI as the kubelet would.
func pullLabImages(ctx context.Context, node lab.Node, binDir string, refs []string, report *output.Reporter) error {
	if len(refs) == 0 {
		return nil
	}
	client, err := cri.Dial("unix://"+node.Socket, func(p string) string { return p })
	if err != nil {
		return err
	}
	defer func() { _ = client.Close() }()
	for _, ref := range refs {
		if _, err := client.Pull(ctx, ref); err != nil {
			return fmt.Errorf("%w (%s has no binary to build it from: run `make lab-binaries`)", err, binDir)
		}
		report.Infof("pulled %s", ref)
	}
	return nil
}

// kubernetesVersion asks a Kubernetes binary for its version:
// "Kubernetes v1.36.3" -> "v1.36.3".
func kubernetesVersion(binary string) (string, error) {
	out, err := exec.Command(binary, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("ask %s for its version: %w", binary, err)
	}
	fields := strings.Fields(string(out))
	if len(fields) != 2 {
		return "", fmt.Errorf("ask %s for its version: it answered %q, want \"Kubernetes vX.Y.Z\"", binary, out)
	}
	return fields[1], nil
}
