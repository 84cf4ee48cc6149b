package config

import (
	"fmt"
	"path/filepath"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ownedPath is one path of kubeboot's on a node: a directory it creates,
// a file it writes, or an input it reads from the node. Every such path
// comes from ownedPaths, and validateOwnedPaths decides once that no two
// overlap where that is not their place.
type ownedPath struct {
	// key names the path for in: the field, or field/name for a path
	// derived from one.
	key string
	// field is what sets the path, value its value and example its default.
	field          *field.Path
	value, example string
	// path is the node path, what says what it is.
	path, what string
	dir        bool
	// only, for a directory, says why it holds nothing but the paths
	// whose in names it; empty for a directory others may share.
	only string
	// in lists the keys of the exclusive directories the path belongs in.
	in []string
}

// The fields of the owned paths.
var (
	fieldCertificatesDir  = field.NewPath("certificates", "dir")
	fieldKubeconfigDir    = field.NewPath("paths", "kubeconfigDir")
	fieldManifestsDir     = field.NewPath("paths", "manifestsDir")
	fieldEtcdDataDir      = field.NewPath("etcd", "local", "dataDir")
	fieldEtcdSnapshotsDir = field.NewPath("etcd", "local", "snapshotsDir")
	fieldKubeletConfig    = field.NewPath("kubelet", "configFile")
	fieldKubeletCertDir   = field.NewPath("kubelet", "certDir")
	fieldAuditLogDir      = field.NewPath("security", "audit", "logDir")
	fieldAuditPolicy      = field.NewPath("security", "audit", "policyFile")
	fieldPatchesDir       = field.NewPath("patchesDir")
)

// pathTable builds the table of one configuration's owned paths, one
// field at a time.
type pathTable []ownedPath

// dir adds a directory set by a field; only says why it is exclusive.
func (t *pathTable) dir(f *field.Path, value, example, what, only string) {
	*t = append(*t, ownedPath{key: f.String(), field: f, value: value, example: example, path: value, what: what, dir: true, only: only})
}

// file adds a file set by a field.
func (t *pathTable) file(f *field.Path, value, example, what string, in ...string) {
	*t = append(*t, ownedPath{key: f.String(), field: f, value: value, example: example, path: value, what: what, in: in})
}

// derived adds a path that kubeboot places under the directory set by
// parent; in lists the exclusive directories it belongs in.
func (t *pathTable) derived(parent *field.Path, rel, what, only string, dir bool, in ...string) {
	base := (*t)[slices.IndexFunc(*t, func(e ownedPath) bool { return e.key == parent.String() })]
	*t = append(*t, ownedPath{key: base.key + "/" + rel, field: parent, value: base.value, example: base.example,
		path: filepath.Join(base.path, rel), what: what, dir: dir, only: only, in: in})
}

// beside adds a directory that kubeboot places at path, beside the
// directory set by parent; only says why it is exclusive.
func (t *pathTable) beside(parent *field.Path, path, what, only string) {
	base := (*t)[slices.IndexFunc(*t, func(e ownedPath) bool { return e.key == parent.String() })]
	*t = append(*t, ownedPath{key: base.key + "/" + filepath.Base(path), field: parent, value: base.value, example: base.example,
		path: path, what: what, dir: true, only: only})
}

// issuedCerts lists the certificates and keys init writes under
// certificates.dir, as package pki's specs issue them.
func issuedCerts(c *ClusterConfiguration) []string {
	certs := []string{CertCA, CertAPIServer, CertAPIServerKubeletClient, CertFrontProxyCA, CertFrontProxyClient, CertControllerManager, CertScheduler}
	if c.Etcd.Local != nil && c.Etcd.External == nil {
		certs = append(certs, CertEtcdCA, CertEtcdServer, CertEtcdPeer, CertEtcdHealthcheckClient, CertAPIServerEtcdClient)
	}
	if On(c.Security.VerifyKubeletServingCerts) {
		certs = append(certs, CertKubeletServer)
	}
	return certs
}

// ownedPaths is the table of every path kubeboot owns on the node of c:
// the PKI, the kubeconfigs and kubeboot's own directories under
// paths.kubeconfigDir, the manifests, the etcd data dir, the kubelet's
// files, the audit log, and the inputs it reads (patches, audit policy,
// external etcd credentials). Unset paths are left out.
func ownedPaths(c *ClusterConfiguration) []ownedPath {
	var t pathTable
	pki := fieldCertificatesDir.String()
	t.dir(fieldCertificatesDir, c.Certificates.Dir, DefaultCertificatesDir, "the certificates directory",
		"it holds the PKI, which the control plane mounts and reset empties")
	if c.Etcd.Local != nil && c.Etcd.External == nil {
		t.derived(fieldCertificatesDir, "etcd", "the etcd PKI directory", "it holds the etcd PKI", true, pki)
	}
	for _, name := range issuedCerts(c) {
		in := []string{pki}
		if filepath.Dir(name) == "etcd" {
			in = append(in, pki+"/etcd")
		}
		t.derived(fieldCertificatesDir, name+".crt", "the certificate "+name+".crt", "", false, in...)
		t.derived(fieldCertificatesDir, name+".key", "the private key "+name+".key", "", false, in...)
	}
	t.derived(fieldCertificatesDir, CertCASigner+".crt", "the controller-manager's signing certificate", "", false, pki)
	t.derived(fieldCertificatesDir, RotationStash, "the new CAs' keys of a CA rotation under way", "", false, pki)
	t.derived(fieldCertificatesDir, KeyServiceAccount+".key", "the service-account signing key", "", false, pki)
	t.derived(fieldCertificatesDir, KeyServiceAccount+".pub", "the service-account public key", "", false, pki)
	t.derived(fieldCertificatesDir, FileEncryptionConfig, "the encryption key of Secrets", "", false, pki)

	kc := fieldKubeconfigDir.String()
	t.dir(fieldKubeconfigDir, c.Paths.KubeconfigDir, DefaultKubeconfigDir, "the kubeconfig directory", "")
	for _, name := range []string{KubeconfigAdmin, KubeconfigSuperAdmin, KubeconfigKubelet, KubeconfigControllerManager,
		KubeconfigScheduler, KubeconfigBootstrapKubelet, KubeconfigCSRApprover} {
		t.derived(fieldKubeconfigDir, name, "the kubeconfig "+name, "", false)
	}
	t.derived(fieldKubeconfigDir, apiServerConfigDir, "the API server's policy directory", "it holds the API server's policy files", true)
	for _, name := range []string{FileAdmissionConfig, FileAuthenticationConfig, FileAuditPolicy} {
		if name == FileAuditPolicy && c.Security.Audit.PolicyFile == c.AuditPolicyPath() && c.Security.Audit.PolicyFile != "" {
			continue // the user's policy at kubeboot's path: one file, the user's
		}
		t.derived(fieldKubeconfigDir, filepath.Join(apiServerConfigDir, name), "the API server's "+name, "", false, kc+"/"+apiServerConfigDir)
	}
	t.derived(fieldKubeconfigDir, "kubeboot", "kubeboot's state directory (node lock, staged manifests, backups, the record of applies)",
		"it holds kubeboot's node lock, staged manifests, backups and record of applies", true)

	t.dir(fieldManifestsDir, c.Paths.ManifestsDir, DefaultManifestsDir, "the manifest directory",
		"the kubelet runs every file in it as a static pod")
	for _, name := range StaticPodNames {
		t.derived(fieldManifestsDir, name+".yaml", "the manifest "+name+".yaml", "", false, fieldManifestsDir.String())
	}
	if c.Etcd.Local != nil {
		t.dir(fieldEtcdDataDir, c.Etcd.Local.DataDir, DefaultEtcdDataDir, "the etcd data directory",
			"reset removes it with everything in it")
		t.beside(fieldEtcdDataDir, c.EtcdRestoringDir(), "the directory etcd restore writes the new data dir into",
			"etcd restore removes it with everything in it before it writes the new data dir there")
		t.beside(fieldEtcdDataDir, c.EtcdBeforeRestoreDir(), "the directory etcd restore keeps the old data dir in",
			"etcd restore moves the old data dir there, then removes it with everything in it")
		t.beside(fieldEtcdDataDir, c.EtcdLeftDir(), "the directory a rejoin keeps the data of a member its cluster left in",
			"a control-plane join moves a left member's data dir there, then removes it with everything in it")
		t.dir(fieldEtcdSnapshotsDir, c.Etcd.Local.SnapshotsDir, DefaultEtcdSnapshotsDir, "the etcd snapshot directory",
			"it holds etcd snapshots, each with every Secret of the cluster")
	}
	t.file(fieldKubeletConfig, c.Kubelet.ConfigFile, DefaultKubeletConfigFile, "the kubelet's configuration file")
	t.dir(fieldKubeletCertDir, c.Kubelet.CertDir, DefaultKubeletCertDir, "the kubelet's certificate directory",
		"the kubelet keeps its rotated certificates there")
	t.dir(fieldAuditLogDir, c.Security.Audit.LogDir, DefaultAuditLogDir, "the audit log directory",
		"the API server mounts it read-write")
	t.derived(fieldAuditLogDir, FileAuditLog, "the audit log", "", false, fieldAuditLogDir.String())
	t.file(fieldAuditPolicy, c.Security.Audit.PolicyFile, "", "the audit policy", kc+"/"+apiServerConfigDir)
	t.dir(fieldPatchesDir, c.PatchesDir, "", "the patches directory", "kubeboot reads every file in it as a patch")
	if x := c.Etcd.External; x != nil {
		// kubeadm's layout keeps them in the certificates directory.
		for _, f := range []struct {
			name, value string
		}{{"caFile", x.CAFile}, {"certFile", x.CertFile}, {"keyFile", x.KeyFile}} {
			t.file(field.NewPath("etcd", "external", f.name), f.value, "", "the external etcd's "+f.name, pki)
		}
	}
	return slices.DeleteFunc(t, func(p ownedPath) bool { return !checkable(p.value) })
}

// validateOwnedPaths refuses two owned paths that are one, a path inside
// a file, and a path inside an exclusive directory that is not its place.
// Each field gets one error, and each pair of fields at most one, on the
// side the user set: a field at its default is kubeboot's choice, and the
// other field is what moved. Paths that are one are reported first, as
// the plainer mistake. A field in refused has its own error already.
func validateOwnedPaths(c *ClusterConfiguration, refused func(value string) bool) field.ErrorList {
	paths := slices.DeleteFunc(ownedPaths(c), func(p ownedPath) bool { return refused(p.value) })
	var errs field.ErrorList
	blamed, pairs := map[string]bool{}, map[[2]string]bool{}
	for _, check := range []func(a, b ownedPath) (ownedPath, ownedPath, string){same, overlap} {
		for i, a := range paths {
			for _, b := range paths[i+1:] {
				p, o, msg := check(a, b)
				if msg == "" {
					continue
				}
				// Only now: spelling the fields of every pair cost more
				// than the rest of the configuration's validation.
				pair := [2]string{p.field.String(), o.field.String()}
				if blamed[pair[0]] || pairs[pair] {
					continue
				}
				blamed[pair[0]], pairs[pair], pairs[[2]string{pair[1], pair[0]}] = true, true, true
				errs = append(errs, field.Invalid(p.field, p.value, msg+"; "+fix(p)))
			}
		}
	}
	return errs
}

// same says whether a and b are one path, and if so which one to blame
// and why.
func same(a, b ownedPath) (ownedPath, ownedPath, string) {
	if a.path != b.path {
		return a, b, ""
	}
	p, o := blame(b, a)
	return p, o, fmt.Sprintf("%s would be both %s and %s (%s)", p.path, p.what, o.what, source(o))
}

// overlap says whether one of a and b lies inside the other where that is
// not its place, and if so which one to blame and why.
func overlap(a, b ownedPath) (ownedPath, ownedPath, string) {
	switch {
	case a.path == b.path:
	case within(b.path, a.path):
		return inside(b, a)
	case within(a.path, b.path):
		return inside(a, b)
	}
	return a, b, ""
}

// inside checks inner, a path inside outer.
func inside(inner, outer ownedPath) (ownedPath, ownedPath, string) {
	p, o := blame(inner, outer)
	switch {
	case !outer.dir:
		return p, o, fmt.Sprintf("%s (%s) would lie inside %s %s (%s), which is a file", inner.path, inner.what, outer.what, outer.path, source(outer))
	case outer.only == "" || slices.Contains(inner.in, outer.key):
		return p, o, ""
	}
	return p, o, fmt.Sprintf("%s (%s) would lie inside %s %s (%s), where it has no place: %s",
		inner.path, inner.what, outer.what, outer.path, source(outer), outer.only)
}

// blame picks which of two overlapping paths to report: the one whose
// field the user moved from its default, else first.
func blame(first, second ownedPath) (ownedPath, ownedPath) {
	if first.value == first.example && second.value != second.example {
		return second, first
	}
	return first, second
}

// source names the field a path comes from.
func source(p ownedPath) string {
	if p.path == p.value {
		return p.field.String()
	}
	return "under " + p.field.String()
}

// fix says how to give p a path of its own.
func fix(p ownedPath) string {
	kind := "file"
	if p.path != p.value || p.dir {
		kind = "directory"
	}
	if p.example == "" {
		return "give it a " + kind + " of its own, outside kubeboot's"
	}
	return "give it a " + kind + " of its own such as " + p.example
}
