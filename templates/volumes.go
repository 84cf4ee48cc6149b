package templates

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/internal/config"
)

// hostMount is a hostPath volume and its mount. The mount path is the host
// path, so a manifest names the same files inside and outside the container.
type hostMount struct {
	name     string
	path     string
	readOnly bool
	pathType corev1.HostPathType
}

// caBundleDirs are the host directories that hold the system's trusted CAs
// and the files their symlinks point into, from kubeadm's list. The API
// server and the controller manager mount them to trust what the host
// trusts (OIDC issuers, webhooks, cloud APIs). kubeadm mounts the last five
// only if they exist on the host; kubeboot's builders don't look at the
// host, so they mount all of them and let the kubelet create missing ones.
var caBundleDirs = []hostMount{
	{name: "ca-certs", path: "/etc/ssl/certs"},
	{name: "etc-ca-certificates", path: "/etc/ca-certificates"},
	{name: "etc-pki-ca-trust", path: "/etc/pki/ca-trust"},
	{name: "etc-pki-tls-certs", path: "/etc/pki/tls/certs"},
	{name: "usr-local-share-ca-certificates", path: "/usr/local/share/ca-certificates"},
	{name: "usr-share-ca-certificates", path: "/usr/share/ca-certificates"},
}

// caBundleMounts returns the read-only mounts of the host's CA bundles.
func caBundleMounts() []hostMount {
	mounts := make([]hostMount, len(caBundleDirs))
	for i, m := range caBundleDirs {
		m.readOnly, m.pathType = true, corev1.HostPathDirectoryOrCreate
		mounts[i] = m
	}
	return mounts
}

// pkiMount mounts the whole certificates directory read-only. It must
// exist: an empty directory created by the kubelet would only turn a clear
// "missing directory" event into a crash loop about missing files.
func pkiMount(cfg *config.ClusterConfiguration) hostMount {
	return hostMount{name: "k8s-certs", path: cfg.Certificates.Dir, readOnly: true, pathType: corev1.HostPathDirectory}
}

// kubeconfigMount mounts one kubeconfig file read-only; like the PKI, it
// must exist rather than be created empty.
func kubeconfigMount(cfg *config.ClusterConfiguration, file string) hostMount {
	return hostMount{name: "kubeconfig", path: cfg.KubeconfigPath(file), readOnly: true, pathType: corev1.HostPathFile}
}

// externalEtcdMounts mounts the directories of an external etcd's CA,
// certificate and key, leaving out those already mounted (inside the PKI
// directory or a CA bundle directory) and those nested in another one.
func externalEtcdMounts(cfg *config.ClusterConfiguration) []hostMount {
	covered := []string{cfg.Certificates.Dir}
	for _, m := range caBundleDirs {
		covered = append(covered, m.path)
	}
	var dirs []string
	for _, file := range []string{cfg.Etcd.External.CAFile, cfg.Etcd.External.CertFile, cfg.Etcd.External.KeyFile} {
		dir := filepath.Dir(filepath.Clean(file))
		if !slices.ContainsFunc(covered, func(root string) bool { return within(dir, root) }) {
			dirs = append(dirs, dir)
		}
	}
	slices.Sort(dirs)
	dirs = slices.Compact(dirs)
	var mounts []hostMount
	for i, dir := range dirs {
		// Sorted, a parent comes before everything inside it.
		if slices.ContainsFunc(dirs[:i], func(parent string) bool { return within(dir, parent) }) {
			continue
		}
		mounts = append(mounts, hostMount{
			name:     fmt.Sprintf("etcd-certs-%d", len(mounts)),
			path:     dir,
			readOnly: true,
			pathType: corev1.HostPathDirectory,
		})
	}
	return mounts
}

// within reports whether path is root or inside it. Unlike a plain prefix
// test, /etc/kubernetes/pki-etcd is not inside /etc/kubernetes/pki.
func within(path, root string) bool {
	return path == root || strings.HasPrefix(path, strings.TrimSuffix(root, "/")+"/")
}

// hostPathVolumes turns a component's default mounts, sorted by name, and
// then the user's extra volumes, in their order, into pod volumes and
// container mounts.
func hostPathVolumes(defaults []hostMount, extra []config.HostPathMount) ([]corev1.Volume, []corev1.VolumeMount) {
	defaults = slices.Clone(defaults)
	slices.SortFunc(defaults, func(a, b hostMount) int { return strings.Compare(a.name, b.name) })
	var volumes []corev1.Volume
	var mounts []corev1.VolumeMount
	add := func(name, hostPath, mountPath string, readOnly bool, pathType corev1.HostPathType) {
		source := &corev1.HostPathVolumeSource{Path: hostPath}
		if pathType != "" {
			source.Type = &pathType
		}
		volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: source}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: mountPath, ReadOnly: readOnly})
	}
	for _, m := range defaults {
		add(m.name, m.path, m.path, m.readOnly, m.pathType)
	}
	for _, m := range extra {
		add(m.Name, m.HostPath, m.MountPath, m.ReadOnly, m.PathType)
	}
	return volumes, mounts
}
