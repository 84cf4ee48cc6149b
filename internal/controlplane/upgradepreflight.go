package controlplane

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/internal/health"
	"github.com/kubeboot/kubeboot/phases"
)

// snapshotHeadroom is free space wanted beyond the etcd data dir's size,
// which bounds the snapshot's.
const snapshotHeadroom = 64 << 20

// upgradePreflight refuses an upgrade whose own manifests
// (addons.manifests) it could not apply, one that would lay flannel over
// the cluster's own pod network (see phases.CheckPodNetwork), one that skips a minor version or goes
// back one, one after which the kubelet installed would not match the
// control plane (see checkKubeletSkew), one started on a control plane that is not healthy (a failure
// could not be told apart from the upgrade's), and one without the disk
// space for the etcd snapshot; these last two only when changing says a
// manifest changes: an upgrade that replaces no component needs neither,
// and probing every component took a converged upgrade apply 13-17 ms.
// apiserver is the node's API server pod; current decodes all of the
// node's pods, for the probes. kubeletSkew waits for the kubelet's check,
// which upgradeControlPlane starts early (see checkKubeletSkew).
func upgradePreflight(ctx context.Context, s *phases.Node, apiserver *corev1.Pod, current func() (map[string]*corev1.Pod, error), kubeletSkew func() error, changing func() (bool, error)) error {
	if err := phases.CheckAddonManifests(ctx, s); err != nil {
		return err
	}
	// Its request goes while the probes below wait.
	podNetwork := inBackground(func() error { return phases.CheckPodNetwork(ctx, s) })
	defer func() { _ = podNetwork() }()
	if err := checkSkew(apiserver, s.Config.KubernetesVersion); err != nil {
		return err
	}
	if err := kubeletSkew(); err != nil {
		return err
	}
	if change, err := changing(); err != nil || !change {
		if err != nil {
			return err
		}
		return podNetwork()
	}
	pods, err := current()
	if err != nil {
		return err
	}
	probes, err := health.Probes(s.Config, pods, s.Files.HostPath)
	if err != nil {
		return err
	}
	timeout := min(30*time.Second, s.Config.Timeouts.ControlPlane.Duration)
	if _, err := health.Wait(ctx, probes, health.WaitOptions{Timeout: timeout, ManifestsDir: s.Config.Paths.ManifestsDir}); err != nil {
		return fmt.Errorf("the control plane is not healthy before the upgrade; fix it first: %w", err)
	}
	if err := podNetwork(); err != nil {
		return err
	}
	if s.Config.Etcd.Local != nil {
		return checkDiskSpace(s)
	}
	return nil
}

// checkSkew allows a patch change and one minor version up, as the
// Kubernetes version skew policy does for the control plane.
func checkSkew(apiserver *corev1.Pod, target string) error {
	if apiserver == nil || len(apiserver.Spec.Containers) == 0 {
		return fmt.Errorf("read the running version: no kube-apiserver manifest")
	}
	image := apiserver.Spec.Containers[0].Image
	tag := image[strings.LastIndex(image, ":")+1:]
	from, err := version.ParseSemantic(tag)
	if err != nil {
		return fmt.Errorf("read the running version from image %q: %w", image, err)
	}
	to, err := version.ParseSemantic(target)
	if err != nil {
		return fmt.Errorf("parse kubernetesVersion %q: %w", target, err)
	}
	switch {
	case to.Major() != from.Major() || to.Minor() < from.Minor():
		return fmt.Errorf("upgrade from %s to %s: downgrades across minor versions are not supported", tag, target)
	case to.Minor() > from.Minor()+1:
		return fmt.Errorf("upgrade from %s to %s: upgrade one minor version at a time (to v%d.%d first)", tag, target, from.Major(), from.Minor()+1)
	}
	return nil
}

// checkKubeletSkew reads the node's kubelet (see phases.ReadKubelet)
// and, when systemd runs it, refuses a kubelet binary that the upgraded
// control plane could not serve: newer than the target release, or more
// than three minor versions older. It is the release the kubelet restarts
// with at the end of the upgrade.
func checkKubeletSkew(ctx context.Context, s *phases.Node, client kubernetes.Interface) (phases.Kubelet, error) {
	kubelet, err := phases.ReadKubelet(ctx, s.Run, client, s.Config.Node.Name)
	if err != nil || !kubelet.Systemd {
		return kubelet, err
	}
	target, err := version.ParseSemantic(s.Config.KubernetesVersion)
	if err != nil {
		return kubelet, fmt.Errorf("parse kubernetesVersion %q: %w", s.Config.KubernetesVersion, err)
	}
	return kubelet, phases.CheckKubeletSkew("the kubelet on the PATH", kubelet.Release, "the control plane this upgrade brings", target)
}

// checkDiskSpace wants room for a snapshot as large as the data dir.
func checkDiskSpace(s *phases.Node) error {
	need := uint64(snapshotHeadroom)
	_ = filepath.WalkDir(s.Files.HostPath(s.Config.Etcd.Local.DataDir), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				need += uint64(info.Size())
			}
		}
		return nil
	})
	dir := s.Files.HostPath(s.Config.Paths.KubeconfigDir)
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return fmt.Errorf("check free space in %q: %w", dir, err)
	}
	if free := st.Bavail * uint64(st.Bsize); free < need {
		return fmt.Errorf("%s has %d MiB free, the etcd snapshot needs %d MiB: free some space", dir, free>>20, need>>20)
	}
	return nil
}
