package config

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubeboot/kubeboot/internal/exit"
)

// TestOwnedPathsOverlap: no two paths of the owned-path table may be one,
// lie inside a file, or lie inside an exclusive directory that is not
// their place; the error names the field the user moved and the fix.
func TestOwnedPathsOverlap(t *testing.T) {
	tests := []struct {
		name   string
		modify func(c *ClusterConfiguration)
		want   string // "" for valid
	}{
		{"kubelet config over the CA key", func(c *ClusterConfiguration) { c.Kubelet.ConfigFile = "/etc/kubernetes/pki/ca.key" },
			`kubelet.configFile: Invalid value: "/etc/kubernetes/pki/ca.key": /etc/kubernetes/pki/ca.key would be both the kubelet's configuration file and the private key ca.key (under certificates.dir); give it a file of its own such as /var/lib/kubelet/config.yaml`},
		{"kubelet config over the encryption key", func(c *ClusterConfiguration) { c.Kubelet.ConfigFile = "/etc/kubernetes/pki/encryption-config.yaml" },
			`kubelet.configFile: Invalid value: "/etc/kubernetes/pki/encryption-config.yaml": /etc/kubernetes/pki/encryption-config.yaml would be both the kubelet's configuration file and the encryption key of Secrets`},
		{"kubelet config over a kubeconfig", func(c *ClusterConfiguration) { c.Kubelet.ConfigFile = "/etc/kubernetes/kubelet.conf" },
			`kubelet.configFile: Invalid value: "/etc/kubernetes/kubelet.conf": /etc/kubernetes/kubelet.conf would be both the kubelet's configuration file and the kubeconfig kubelet.conf`},
		{"kubelet config over a manifest", func(c *ClusterConfiguration) { c.Kubelet.ConfigFile = "/etc/kubernetes/manifests/etcd.yaml" },
			`kubelet.configFile: Invalid value: "/etc/kubernetes/manifests/etcd.yaml": /etc/kubernetes/manifests/etcd.yaml would be both the kubelet's configuration file and the manifest etcd.yaml`},
		{"kubelet config in the manifest dir", func(c *ClusterConfiguration) { c.Kubelet.ConfigFile = "/etc/kubernetes/manifests/kubelet.yaml" },
			`kubelet.configFile: Invalid value: "/etc/kubernetes/manifests/kubelet.yaml": /etc/kubernetes/manifests/kubelet.yaml (the kubelet's configuration file) would lie inside the manifest directory /etc/kubernetes/manifests (paths.manifestsDir), where it has no place: the kubelet runs every file in it as a static pod`},
		{"kubelet config in the PKI", func(c *ClusterConfiguration) { c.Kubelet.ConfigFile = "/etc/kubernetes/pki/kubelet.yaml" },
			`kubelet.configFile: Invalid value: "/etc/kubernetes/pki/kubelet.yaml": /etc/kubernetes/pki/kubelet.yaml (the kubelet's configuration file) would lie inside the certificates directory`},
		{"kubelet config over the audit log", func(c *ClusterConfiguration) { c.Kubelet.ConfigFile = "/var/log/kubernetes/audit/audit.log" },
			`kubelet.configFile: Invalid value: "/var/log/kubernetes/audit/audit.log": /var/log/kubernetes/audit/audit.log would be both the kubelet's configuration file and the audit log`},
		{"kubelet config in kubeboot's state dir", func(c *ClusterConfiguration) { c.Kubelet.ConfigFile = "/etc/kubernetes/kubeboot/lock" },
			`kubelet.configFile: Invalid value: "/etc/kubernetes/kubeboot/lock": /etc/kubernetes/kubeboot/lock (the kubelet's configuration file) would lie inside kubeboot's state directory`},
		{"kubelet config over the API server's policy", func(c *ClusterConfiguration) {
			c.Kubelet.ConfigFile = "/etc/kubernetes/apiserver/admission-config.yaml"
		}, `kubelet.configFile: Invalid value: "/etc/kubernetes/apiserver/admission-config.yaml": /etc/kubernetes/apiserver/admission-config.yaml would be both the kubelet's configuration file and the API server's admission-config.yaml`},
		{"etcd data dir is the etcd PKI", func(c *ClusterConfiguration) { c.Etcd.Local.DataDir = "/etc/kubernetes/pki/etcd" },
			`etcd.local.dataDir: Invalid value: "/etc/kubernetes/pki/etcd": /etc/kubernetes/pki/etcd would be both the etcd data directory and the etcd PKI directory (under certificates.dir); give it a directory of its own such as /var/lib/etcd`},
		{"etcd data dir is the etcd PKI outside /etc", func(c *ClusterConfiguration) {
			c.Certificates.Dir = "/srv/pki"
			c.Etcd.Local.DataDir = "/srv/pki/etcd"
		}, `etcd.local.dataDir: Invalid value: "/srv/pki/etcd": /srv/pki/etcd would be both the etcd data directory and the etcd PKI directory`},
		{"etcd data dir holds the PKI", func(c *ClusterConfiguration) {
			c.Certificates.Dir = "/srv/etcd/pki"
			c.Etcd.Local.DataDir = "/srv/etcd"
		}, `certificates.dir: Invalid value: "/srv/etcd/pki": /srv/etcd/pki (the certificates directory) would lie inside the etcd data directory /srv/etcd (etcd.local.dataDir), where it has no place: reset removes it with everything in it`},
		{"etcd data dir is the kubeconfig dir", func(c *ClusterConfiguration) { c.Etcd.Local.DataDir = "/srv/k"; c.Paths.KubeconfigDir = "/srv/k" },
			`etcd.local.dataDir: Invalid value: "/srv/k": /srv/k would be both the etcd data directory and the kubeconfig directory (paths.kubeconfigDir)`},
		{"manifest dir is the etcd PKI", func(c *ClusterConfiguration) { c.Paths.ManifestsDir = "/etc/kubernetes/pki/etcd" },
			`paths.manifestsDir: Invalid value: "/etc/kubernetes/pki/etcd": /etc/kubernetes/pki/etcd would be both the manifest directory and the etcd PKI directory (under certificates.dir); give it a directory of its own such as /etc/kubernetes/manifests`},
		{"manifest dir inside the PKI", func(c *ClusterConfiguration) { c.Paths.ManifestsDir = "/etc/kubernetes/pki/manifests" },
			`paths.manifestsDir: Invalid value: "/etc/kubernetes/pki/manifests": /etc/kubernetes/pki/manifests (the manifest directory) would lie inside the certificates directory /etc/kubernetes/pki (certificates.dir), where it has no place`},
		{"manifest dir holds the PKI", func(c *ClusterConfiguration) { c.Certificates.Dir = "/etc/kubernetes/manifests/pki" },
			`certificates.dir: Invalid value: "/etc/kubernetes/manifests/pki": /etc/kubernetes/manifests/pki (the certificates directory) would lie inside the manifest directory`},
		{"kubeconfig dir inside the PKI", func(c *ClusterConfiguration) { c.Paths.KubeconfigDir = "/etc/kubernetes/pki/conf" },
			`paths.kubeconfigDir: Invalid value: "/etc/kubernetes/pki/conf": /etc/kubernetes/pki/conf (the kubeconfig directory) would lie inside the certificates directory`},
		{"PKI is kubeboot's state dir", func(c *ClusterConfiguration) { c.Certificates.Dir = "/etc/kubernetes/kubeboot" },
			`certificates.dir: Invalid value: "/etc/kubernetes/kubeboot": /etc/kubernetes/kubeboot would be both the certificates directory and kubeboot's state directory`},
		{"PKI is the API server's policy dir", func(c *ClusterConfiguration) { c.Certificates.Dir = "/etc/kubernetes/apiserver" },
			`certificates.dir: Invalid value: "/etc/kubernetes/apiserver": /etc/kubernetes/apiserver would be both the certificates directory and the API server's policy directory`},
		{"audit log dir holds the kubeconfigs", func(c *ClusterConfiguration) { c.Security.Audit.LogDir = "/etc/kubernetes" },
			`security.audit.logDir: Invalid value: "/etc/kubernetes": /etc/kubernetes would be both the audit log directory and the kubeconfig directory`},
		{"audit log dir holds the manifests", func(c *ClusterConfiguration) {
			c.Security.Audit.LogDir = "/srv/a"
			c.Paths.ManifestsDir = "/srv/a/manifests"
		},
			`paths.manifestsDir: Invalid value: "/srv/a/manifests": /srv/a/manifests (the manifest directory) would lie inside the audit log directory /srv/a (security.audit.logDir), where it has no place: the API server mounts it read-write`},
		{"kubelet cert dir is the PKI", func(c *ClusterConfiguration) { c.Kubelet.CertDir = "/etc/kubernetes/pki" },
			`kubelet.certDir: Invalid value: "/etc/kubernetes/pki": /etc/kubernetes/pki would be both the kubelet's certificate directory and the certificates directory`},
		{"kubelet config inside a file", func(c *ClusterConfiguration) { c.Kubelet.ConfigFile = "/etc/kubernetes/admin.conf/config.yaml" },
			`kubelet.configFile: Invalid value: "/etc/kubernetes/admin.conf/config.yaml": /etc/kubernetes/admin.conf/config.yaml (the kubelet's configuration file) would lie inside the kubeconfig admin.conf /etc/kubernetes/admin.conf (under paths.kubeconfigDir), which is a file`},
		{"audit policy is the CA key", func(c *ClusterConfiguration) { c.Security.Audit.PolicyFile = "/etc/kubernetes/pki/ca.key" },
			`security.audit.policyFile: Invalid value: "/etc/kubernetes/pki/ca.key": /etc/kubernetes/pki/ca.key would be both the audit policy and the private key ca.key (under certificates.dir); give it a file of its own, outside kubeboot's`},
		{"audit policy in the manifest dir", func(c *ClusterConfiguration) { c.Security.Audit.PolicyFile = "/etc/kubernetes/manifests/policy.yaml" },
			`security.audit.policyFile: Invalid value: "/etc/kubernetes/manifests/policy.yaml": /etc/kubernetes/manifests/policy.yaml (the audit policy) would lie inside the manifest directory`},
		{"patches dir is the manifest dir", func(c *ClusterConfiguration) { c.PatchesDir = "/etc/kubernetes/manifests" },
			`patchesDir: Invalid value: "/etc/kubernetes/manifests": /etc/kubernetes/manifests would be both the patches directory and the manifest directory`},
		{"patches dir holds the kubelet config", func(c *ClusterConfiguration) {
			c.PatchesDir = "/srv/patches"
			c.Kubelet.ConfigFile = "/srv/patches/kubelet.yaml"
		}, `kubelet.configFile: Invalid value: "/srv/patches/kubelet.yaml": /srv/patches/kubelet.yaml (the kubelet's configuration file) would lie inside the patches directory`},
		{"external etcd key is kubeboot's key", func(c *ClusterConfiguration) {
			c.Etcd = Etcd{External: &ExternalEtcd{Endpoints: []string{"https://10.0.0.2:2379"}, CAFile: "/etc/kubernetes/pki/etcd/ca.crt",
				CertFile: "/etc/kubernetes/pki/apiserver-etcd-client.crt", KeyFile: "/etc/kubernetes/pki/apiserver.key"}}
		}, `etcd.external.keyFile: Invalid value: "/etc/kubernetes/pki/apiserver.key": /etc/kubernetes/pki/apiserver.key would be both the external etcd's keyFile and the private key apiserver.key`},

		{"the defaults", func(*ClusterConfiguration) {}, ""},
		{"the user's audit policy at kubeboot's path", func(c *ClusterConfiguration) {
			c.Security.Audit.PolicyFile = "/etc/kubernetes/apiserver/audit-policy.yaml"
		}, ""},
		{"the user's audit policy beside the kubeconfigs", func(c *ClusterConfiguration) { c.Security.Audit.PolicyFile = "/etc/kubernetes/audit.yaml" }, ""},
		{"external etcd in kubeadm's layout", func(c *ClusterConfiguration) {
			c.Etcd = Etcd{External: &ExternalEtcd{Endpoints: []string{"https://10.0.0.2:2379"}, CAFile: "/etc/kubernetes/pki/etcd/ca.crt",
				CertFile: "/etc/kubernetes/pki/apiserver-etcd-client.crt", KeyFile: "/etc/kubernetes/pki/apiserver-etcd-client.key"}}
		}, ""},
		{"a lab's layout", func(c *ClusterConfiguration) {
			c.Etcd.Local.DataDir = "/tmp/lab/etcd"
			c.Certificates.Dir = "/tmp/lab/pki"
			c.Paths = Paths{ManifestsDir: "/tmp/lab/manifests", KubeconfigDir: "/tmp/lab"}
			c.Kubelet.ConfigFile = "/tmp/lab/kubelet/config.yaml"
			c.Security.Audit.LogDir = "/tmp/lab/audit"
			c.PatchesDir = "/tmp/lab/patches"
		}, ""},
		{"a kubelet config beside the kubeconfigs", func(c *ClusterConfiguration) { c.Kubelet.ConfigFile = "/etc/kubernetes/kubelet.yaml" }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New()
			SetDefaults(c, Host{Name: "node-1", Address: "10.0.0.10"})
			tt.modify(c)
			errs := validateOwnedDirs(c)
			wantOneError(t, errs, tt.want)
		})
	}
}

// TestOwnedDirsInSystemTrees: every directory kubeboot owns is refused
// anywhere in the system's and its users' trees, at any depth, but for
// Kubernetes' own /etc/kubernetes, naming the tree and the fix.
func TestOwnedDirsInSystemTrees(t *testing.T) {
	for _, tc := range []struct {
		set       func(c *ClusterConfiguration, dir string)
		dir, want string // want "" for valid
	}{
		{func(c *ClusterConfiguration, d string) { c.Etcd.Local.DataDir = d }, "/root/.ssh", "such as /var/lib/etcd"},
		{func(c *ClusterConfiguration, d string) { c.Etcd.Local.DataDir = d }, "/home/someone", "such as /var/lib/etcd"},
		{func(c *ClusterConfiguration, d string) { c.Etcd.Local.DataDir = d }, "/etc/ssh", "such as /var/lib/etcd"},
		{func(c *ClusterConfiguration, d string) { c.Etcd.Local.DataDir = d }, "/boot/grub", "such as /var/lib/etcd"},
		{func(c *ClusterConfiguration, d string) { c.Etcd.Local.DataDir = d }, "/usr/local/share/x", "such as /var/lib/etcd"},
		{func(c *ClusterConfiguration, d string) { c.Etcd.Local.DataDir = d }, "/run/etcd", "such as /var/lib/etcd"},
		{func(c *ClusterConfiguration, d string) { c.Etcd.Local.SnapshotsDir = d }, "/etc/ssl/certs", "kubeboot would make it 0700 and, on prune, remove the snapshots in it; use a directory of its own such as /var/lib/kubeboot/etcd-snapshots"},
		{func(c *ClusterConfiguration, d string) { c.Certificates.Dir = d }, "/etc/ssl/private", "such as /etc/kubernetes/pki"},
		{func(c *ClusterConfiguration, d string) { c.Paths.ManifestsDir = d }, "/usr/share/manifests", "such as /etc/kubernetes/manifests"},
		{func(c *ClusterConfiguration, d string) { c.Security.Audit.LogDir = d }, "/home/me/audit", "such as /var/log/kubernetes/audit"},
		{func(c *ClusterConfiguration, d string) { c.Kubelet.CertDir = d }, "/etc/pki/kubelet", "such as /var/lib/kubelet/pki"},
		{func(c *ClusterConfiguration, d string) { c.Etcd.Local.SnapshotsDir = d }, "/etc/kubernetes/etcd-snapshots", ""},
		{func(c *ClusterConfiguration, d string) { c.Etcd.Local.SnapshotsDir = d }, "/srv/snapshots", ""},
	} {
		c := New()
		SetDefaults(c, Host{Name: "node-1", Address: "10.0.0.10"})
		tc.set(c, tc.dir)
		errs := Validate(c)
		switch {
		case tc.want == "" && len(errs) > 0:
			t.Errorf("%s: %v", tc.dir, errs)
		case tc.want != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), `Invalid value: "`+tc.dir+`": inside /`) ||
			!strings.Contains(errs[0].Error(), ", which belongs to the system and its users: kubeboot would ") || !strings.Contains(errs[0].Error(), tc.want)):
			t.Errorf("%s: got %v, want one refusal naming the tree and %q", tc.dir, errs, tc.want)
		}
	}
}

// TestCheckOwnedDir: a directory given on the command line is checked as
// the configuration's are, relative ones from the current directory.
func TestCheckOwnedDir(t *testing.T) {
	for dir, want := range map[string]string{
		"/tmp":           "--dir /tmp: a system directory: kubeboot would make it 0700",
		"/etc/ssl/certs": "--dir /etc/ssl/certs: inside /etc, which belongs to the system and its users: kubeboot would make it 0700",
		"/":              "--dir /: a system directory",
		"/srv/snapshots": "",
		"/tmp/snapshots": "",
	} {
		err := CheckOwnedDir("--dir", dir, SnapshotsDirUse, DefaultEtcdSnapshotsDir)
		if (want == "") != (err == nil) || err != nil && (!strings.Contains(err.Error(), want) || exit.Code(err) != exit.Usage) {
			t.Errorf("%s: %v, want %q", dir, err, want)
		}
	}
	t.Chdir("/etc")
	if err := CheckOwnedDir("--dir", "ssl", SnapshotsDirUse, DefaultEtcdSnapshotsDir); err == nil || !strings.Contains(err.Error(), "--dir ssl: inside /etc") {
		t.Errorf("ssl in /etc: %v", err)
	}
}

// wantOneError fails the test unless errs is empty for an empty want, or
// is one error containing want.
func wantOneError(t *testing.T, errs field.ErrorList, want string) {
	t.Helper()
	if want == "" {
		if len(errs) > 0 {
			t.Fatalf("got %v, want no error", errs)
		}
		return
	}
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), want) {
		t.Fatalf("got %v, want one error containing\n%s", errs, want)
	}
}

// TestWithin: a path lies within a directory when it is the directory or
// below it, never when it only shares a prefix of its name.
func TestWithin(t *testing.T) {
	for _, tc := range []struct {
		path, dir string
		want      bool
	}{
		{"/etc/kubernetes", "/etc/kubernetes", true},
		{"/etc/kubernetes/pki/ca.crt", "/etc/kubernetes", true},
		{"/etc/kubernetes-old", "/etc/kubernetes", false},
		{"/etc", "/etc/kubernetes", false},
		{"/var/lib/etcd", "/", true},
		{"/", "/", true},
	} {
		if got := within(tc.path, tc.dir); got != tc.want {
			t.Errorf("within(%q, %q) = %v, want %v", tc.path, tc.dir, got, tc.want)
		}
	}
}
