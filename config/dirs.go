package config

import (
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
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
		{field.NewPath("certificates", "dir"), c.Certificates.Dir, "chmod it and, on reset, remove it", DefaultCertificatesDir},
		{field.NewPath("paths", "kubeconfigDir"), c.Paths.KubeconfigDir, "write into it and, on reset, remove what it wrote", DefaultKubeconfigDir},
		{field.NewPath("paths", "manifestsDir"), c.Paths.ManifestsDir, "chmod it, and the kubelet would run every file in it as a pod", DefaultManifestsDir},
		{field.NewPath("security", "audit", "logDir"), c.Security.Audit.LogDir, "chmod it", DefaultAuditLogDir},
	}
	if c.Etcd.Local != nil {
		dirs = append(dirs, ownedDir{field.NewPath("etcd", "local", "dataDir"), c.Etcd.Local.DataDir,
			"chmod and chown it and, on reset, remove it with everything in it", DefaultEtcdDataDir},
			ownedDir{fieldEtcdSnapshotsDir, c.Etcd.Local.SnapshotsDir,
				"make it 0700 and, on prune, remove the snapshots in it", DefaultEtcdSnapshotsDir})
	}
	return dirs
}

// dataFreeTrees are trees of the operating system, its configuration and
// its users in which no etcd data dir belongs, at any depth: reset removes
// the data dir with everything in it, and init gives it to the etcd user,
// so `etcd.local.dataDir: /root/.ssh` would hand root's keys to etcd and
// then delete them. Elsewhere, reset checks the directory's contents
// before it removes it.
var dataFreeTrees = []string{
	"/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
	"/proc", "/root", "/run", "/sbin", "/sys", "/usr",
}

// validateOwnedDirs refuses system directories as kubeboot's own, an etcd
// data dir in a tree of the system's, and owned paths that overlap (see
// validateOwnedPaths).
func validateOwnedDirs(c *ClusterConfiguration) field.ErrorList {
	var errs field.ErrorList
	for _, d := range ownedDirs(c) {
		if checkable(d.dir) && isSystemDir(d.dir) {
			errs = append(errs, field.Invalid(d.path, d.dir,
				"a system directory: kubeboot would "+d.does+"; use a directory of its own such as "+d.example))
		}
	}
	errs = append(errs, validateKubeletConfigFile(c.Kubelet.ConfigFile)...)
	overlaps := validateOwnedPaths(c, isSystemDir)
	if l := c.Etcd.Local; l != nil && checkable(l.DataDir) && !isSystemDir(l.DataDir) &&
		!slices.ContainsFunc(overlaps, func(e *field.Error) bool { return e.Field == fieldEtcdDataDir.String() }) {
		for _, tree := range dataFreeTrees {
			if within(l.DataDir, tree) {
				errs = append(errs, field.Invalid(fieldEtcdDataDir, l.DataDir,
					"inside "+tree+", which belongs to the system and its users: reset removes the etcd data dir with everything in it; give etcd a directory of its own such as "+DefaultEtcdDataDir))
			}
		}
	}
	return append(errs, overlaps...)
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

// within reports whether path is dir or below it; both are clean.
func within(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}
