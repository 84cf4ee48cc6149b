package config

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubeboot/kubeboot/internal/exit"
)

// systemDirs are directories the operating system and its packages own.
// kubeboot creates its own directories, sets their modes and, on reset,
// removes them, so none of these, nor an ancestor of one, may be one of
// kubeboot's: `etcd.local.dataDir: /var/lib` would make /var/lib 0700 and
// let reset delete the package database. Beyond the top-level directories,
// the list holds the /usr and /var directories that packages fill, because
// on merged-/usr systems /lib and /bin are only links to /usr/lib and
// /usr/bin, and the kubelet's own directory.
var systemDirs = []string{
	"/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
	"/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp",
	"/usr", "/usr/bin", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libexec", "/usr/local",
	"/usr/local/bin", "/usr/local/lib", "/usr/local/sbin", "/usr/sbin", "/usr/share",
	"/var", "/var/backups", "/var/cache", "/var/lib", "/var/lib/kubelet", "/var/log",
	"/var/mail", "/var/opt", "/var/run", "/var/spool", "/var/tmp",
}

// ownedDir is a directory kubeboot creates and changes, with what it does
// to it and the default to suggest instead of a system directory.
type ownedDir struct {
	path    *field.Path
	dir     string
	does    string
	example string
}

func ownedDirs(c *ClusterConfiguration) []ownedDir {
	dirs := []ownedDir{
		{fieldCertificatesDir, c.Certificates.Dir, "chmod it and, on reset, remove it", DefaultCertificatesDir},
		{fieldKubeconfigDir, c.Paths.KubeconfigDir, "write into it and, on reset, remove what it wrote", DefaultKubeconfigDir},
		{fieldManifestsDir, c.Paths.ManifestsDir, "chmod it, and the kubelet would run every file in it as a pod", DefaultManifestsDir},
		{fieldKubeletCertDir, c.Kubelet.CertDir, "have the kubelet write its certificates into it and, on reset, remove them", DefaultKubeletCertDir},
		{fieldAuditLogDir, c.Security.Audit.LogDir, "chmod it", DefaultAuditLogDir},
	}
	if c.Etcd.Local != nil {
		dirs = append(dirs, ownedDir{fieldEtcdDataDir, c.Etcd.Local.DataDir,
			"chmod and chown it and, on reset, remove it with everything in it", DefaultEtcdDataDir},
			ownedDir{fieldEtcdSnapshotsDir, c.Etcd.Local.SnapshotsDir, SnapshotsDirUse, DefaultEtcdSnapshotsDir})
	}
	return dirs
}

// SnapshotsDirUse is what kubeboot does to a snapshot directory, for the
// refusal of a system directory as one.
const SnapshotsDirUse = "make it 0700 and, on prune, remove the snapshots in it"

// systemTrees are trees of the operating system, its configuration and
// its users in which none of kubeboot's directories belongs, at any
// depth, but for kubernetesTree: `etcd.local.snapshotsDir: /etc/ssl/certs`
// would make the system's CA certificates unreadable to its users, and
// `etcd.local.dataDir: /root/.ssh` would hand root's keys to etcd and let
// reset delete them.
var systemTrees = []string{
	"/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
	"/proc", "/root", "/run", "/sbin", "/sys", "/usr",
}

// kubernetesTree is the tree of a system tree that is Kubernetes' own,
// where kubeadm and kubeboot keep the PKI, the kubeconfigs and the
// manifests.
const kubernetesTree = "/etc/kubernetes"

// systemDirProblem says why dir, a clean absolute path, may not be one of
// kubeboot's directories: it is a system directory or an ancestor of one,
// or it lies in a system tree; "" when it may.
func systemDirProblem(dir string) string {
	if isSystemDir(dir) {
		return "a system directory"
	}
	for _, tree := range systemTrees {
		if within(dir, tree) && !within(dir, kubernetesTree) {
			return "inside " + tree + ", which belongs to the system and its users"
		}
	}
	return ""
}

// CheckOwnedDir refuses dir, given by flag, as a directory of kubeboot's
// when it is a system directory, an ancestor of one, or in a system tree,
// at any depth: does says what kubeboot would do to it and example is a
// directory to use instead. A relative dir is taken from the current
// directory.
func CheckOwnedDir(flag, dir, does, example string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return &exit.UsageError{Msg: fmt.Sprintf("%s %s: %v", flag, dir, err)}
	}
	if problem := systemDirProblem(abs); problem != "" {
		return &exit.UsageError{Msg: fmt.Sprintf("%s %s: %s: kubeboot would %s; use a directory of its own such as %s", flag, dir, problem, does, example)}
	}
	return nil
}

// validateOwnedDirs refuses, as kubeboot's own directories, system
// directories and directories in a system tree, and owned paths that
// overlap (see validateOwnedPaths).
func validateOwnedDirs(c *ClusterConfiguration) field.ErrorList {
	var errs field.ErrorList
	var refused []string
	for _, d := range ownedDirs(c) {
		if !checkable(d.dir) {
			continue
		}
		if problem := systemDirProblem(d.dir); problem != "" {
			refused = append(refused, d.dir)
			errs = append(errs, field.Invalid(d.path, d.dir,
				problem+": kubeboot would "+d.does+"; use a directory of its own such as "+d.example))
		}
	}
	errs = append(errs, validateKubeletConfigFile(c.Kubelet.ConfigFile)...)
	return append(errs, validateOwnedPaths(c, func(value string) bool {
		return isSystemDir(value) || slices.Contains(refused, value)
	})...)
}

// checkable reports whether path is absolute and clean; any other path
// already has its own error.
func checkable(path string) bool {
	return filepath.IsAbs(path) && filepath.Clean(path) == path
}

// kubeletDir is the kubelet's own directory, where kubeadm and kubeboot
// write its configuration by default: a system directory whose files the
// kubelet's configuration may be.
const kubeletDir = "/var/lib/kubelet"

// validateKubeletConfigFile refuses a kubelet configuration file that is a
// system directory or a file directly in one (other than the kubelet's):
// kubeboot overwrites the file and, on reset, removes it, so
// `kubelet.configFile: /etc/passwd` would destroy the password database.
func validateKubeletConfigFile(file string) field.ErrorList {
	if !checkable(file) {
		return nil
	}
	dir := filepath.Dir(file)
	if !isSystemDir(file) && (dir == kubeletDir || !slices.Contains(systemDirs, dir)) {
		return nil
	}
	return field.ErrorList{field.Invalid(field.NewPath("kubelet", "configFile"), file,
		"a system file: kubeboot overwrites it and, on reset, removes it; use a file of its own such as "+DefaultKubeletConfigFile)}
}

// isSystemDir reports whether dir, a clean absolute path, is a system
// directory or an ancestor of one.
func isSystemDir(dir string) bool {
	for _, s := range systemDirs {
		if within(s, dir) {
			return true
		}
	}
	return false
}

// within reports whether path is dir or below it; both are clean. It
// builds no string: configuration validation compares every pair of
// kubeboot's paths with it.
func within(path, dir string) bool {
	if dir == "/" {
		return true
	}
	rest, found := strings.CutPrefix(path, dir)
	return found && (rest == "" || rest[0] == '/')
}
