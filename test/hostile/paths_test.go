package hostile

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// refusedInit is a row in which init on an initialised node refuses the
// configuration fields with exit 2 and message, and changes nothing.
func refusedInit(defect, name, fields, message string) row {
	return row{
		defect: defect, name: name,
		setup: func(e env) []string {
			e.initNode()
			return append([]string{"init", "--root", e.node, "--config", e.config("c.yaml", fields)}, skip...)
		},
		code: 2, message: message,
	}
}

// etcdMember gives dir, on the node, an etcd member's layout.
func etcdMember(e env, dir string) {
	e.t.Helper()
	writeFile(e.t, filepath.Join(e.node, dir, "member/snap/db"), "snapshot", 0o600)
	writeFile(e.t, filepath.Join(e.node, dir, "member/wal/0000000000000000-0000000000000000.wal"), "wal", 0o600)
}

// pathRows are issue 27's classes 1 (paths that overlap kubeboot's own
// files), 2 (system directories below the top level) and 6 (values that
// nothing type-checked).
var pathRows = []row{
	// Class 1: one table of owned paths; none may overlap another.
	refusedInit("27.1", "kubelet.configFile on the CA key", "kubelet: {configFile: /etc/kubernetes/pki/ca.key}\n",
		`kubelet.configFile: Invalid value: "/etc/kubernetes/pki/ca.key": /etc/kubernetes/pki/ca.key would be both the kubelet's configuration file and the private key ca.key (under certificates.dir); give it a file of its own such as /var/lib/kubelet/config.yaml`),
	refusedInit("27.1", "kubelet.configFile on the encryption key", "kubelet: {configFile: /etc/kubernetes/pki/encryption-config.yaml}\n",
		`kubelet.configFile: Invalid value: "/etc/kubernetes/pki/encryption-config.yaml": /etc/kubernetes/pki/encryption-config.yaml would be both the kubelet's configuration file and the encryption key of Secrets`),
	refusedInit("27.1", "kubelet.configFile on admin.conf", "kubelet: {configFile: /etc/kubernetes/admin.conf}\n",
		"would be both the kubelet's configuration file and the kubeconfig admin.conf"),
	refusedInit("27.1", "kubelet.configFile on a manifest", "kubelet: {configFile: /etc/kubernetes/manifests/kube-apiserver.yaml}\n",
		"would be both the kubelet's configuration file and the manifest kube-apiserver.yaml"),
	refusedInit("27.1", "paths.manifestsDir on the etcd PKI", "paths: {manifestsDir: /etc/kubernetes/pki/etcd}\n",
		`paths.manifestsDir: Invalid value: "/etc/kubernetes/pki/etcd": /etc/kubernetes/pki/etcd would be both the manifest directory and the etcd PKI directory (under certificates.dir); give it a directory of its own such as /etc/kubernetes/manifests`),
	refusedInit("27.1", "certificates.dir in the manifest dir", "certificates: {dir: /etc/kubernetes/manifests/pki}\n",
		"would lie inside the manifest directory /etc/kubernetes/manifests (paths.manifestsDir), where it has no place: the kubelet runs every file in it as a static pod"),
	refusedInit("27.1", "certificates.dir on kubeboot's state dir", "certificates: {dir: /etc/kubernetes/kubeboot}\n",
		"would be both the certificates directory and kubeboot's state directory"),
	refusedInit("27.1", "security.audit.logDir on the kubeconfig dir", "security: {audit: {logDir: /etc/kubernetes}}\n",
		"would be both the audit log directory and the kubeconfig directory"),
	refusedInit("27.1", "security.audit.policyFile on the CA key", "security: {audit: {policyFile: /etc/kubernetes/pki/ca.key}}\n",
		"would be both the audit policy and the private key ca.key"),
	refusedInit("27.1", "kubelet.certDir on the PKI", "kubelet: {certDir: /etc/kubernetes/pki}\n",
		"would be both the kubelet's certificate directory and the certificates directory"),
	refusedInit("27.1", "patchesDir on the manifest dir", "patchesDir: /etc/kubernetes/manifests\n",
		"would be both the patches directory and the manifest directory"),
	refusedInit("27.1", "etcd.local.dataDir holding the PKI", "etcd: {local: {dataDir: /srv/kube}}\ncertificates: {dir: /srv/kube/pki}\n",
		"would lie inside the etcd data directory /srv/kube (etcd.local.dataDir), where it has no place: reset removes it with everything in it"),
	{
		defect: "27.1", name: "reset --keep-pki refuses etcd.local.dataDir on the etcd PKI",
		setup: func(e env) []string {
			e.initNode()
			return []string{"reset", "--root", e.node, "--force", "--keep-pki", "--config", e.config("c.yaml", "etcd: {local: {dataDir: /etc/kubernetes/pki/etcd}}\n")}
		},
		code: 2, message: `etcd.local.dataDir: Invalid value: "/etc/kubernetes/pki/etcd": /etc/kubernetes/pki/etcd would be both the etcd data directory and the etcd PKI directory`,
	},

	// Class 2: an etcd data dir in a system tree is refused; elsewhere,
	// reset removes only an empty one or an etcd member's.
	refusedInit("27.2", "etcd.local.dataDir /root/.ssh", "etcd: {local: {dataDir: /root/.ssh}}\n",
		`etcd.local.dataDir: Invalid value: "/root/.ssh": inside /root, which belongs to the system and its users`),
	refusedInit("27.2", "etcd.local.dataDir /home/someone", "etcd: {local: {dataDir: /home/someone}}\n", `etcd.local.dataDir: Invalid value: "/home/someone": inside /home`),
	refusedInit("27.2", "etcd.local.dataDir /etc/ssh", "etcd: {local: {dataDir: /etc/ssh}}\n", `etcd.local.dataDir: Invalid value: "/etc/ssh": inside /etc`),
	refusedInit("27.2", "etcd.local.dataDir /boot/grub", "etcd: {local: {dataDir: /boot/grub}}\n", `etcd.local.dataDir: Invalid value: "/boot/grub": inside /boot`),
	{
		defect: "27.2", name: "reset --force keeps /var/lib/dpkg as etcd.local.dataDir",
		setup: func(e env) []string {
			e.initNode()
			writeFile(e.t, e.path("node/var/lib/dpkg/status"), "Package: bash\n", 0o644)
			writeFile(e.t, e.path("node/var/lib/dpkg/info/bash.list"), "/bin/bash\n", 0o644)
			return []string{"reset", "--root", e.node, "--force", "--config", e.config("c.yaml", "etcd: {local: {dataDir: /var/lib/dpkg}}\n")}
		},
		code: 2, message: "etcd.local.dataDir: /var/lib/dpkg holds info, which is not an etcd data dir (only member/ with snap/, wal/ or wal.tmp/): reset removes the data dir with everything in it, so it removes nothing",
	},
	{
		defect: "27.2", name: "reset --force keeps a data dir with etcd's data and more",
		setup: func(e env) []string {
			e.initNode()
			etcdMember(e, "/srv/etcd")
			writeFile(e.t, e.path("node/srv/etcd/notes.txt"), "mine\n", 0o644)
			return []string{"reset", "--root", e.node, "--force", "--config", e.config("c.yaml", "etcd: {local: {dataDir: /srv/etcd}}\n")}
		},
		code: 2, message: "etcd.local.dataDir: /srv/etcd holds notes.txt",
	},
	{
		defect: "27.2", name: "reset --force removes an etcd member's data dir",
		setup: func(e env) []string {
			c := e.config("c.yaml", "etcd: {local: {dataDir: /srv/etcd}}\n")
			e.kubeboot(append([]string{"init", "--root", e.node, "--config", c}, skip...)...)
			etcdMember(e, "/srv/etcd")
			return []string{"reset", "--root", e.node, "--force", "--config", c}
		},
		code: 0, allowed: []string{"/node"},
		check: func(e env, _ result) {
			if _, err := os.Lstat(e.path("node/srv/etcd")); !os.IsNotExist(err) {
				e.t.Errorf("the data dir is still there: %v", err)
			}
		},
	},

	// Issue 33's class 7: every directory kubeboot owns, in a system tree
	// at any depth, or where etcd restore works.
	refusedInit("33.7", "etcd.local.snapshotsDir /etc/ssl/certs", "etcd: {local: {snapshotsDir: /etc/ssl/certs}}\n",
		`etcd.local.snapshotsDir: Invalid value: "/etc/ssl/certs": inside /etc, which belongs to the system and its users: kubeboot would make it 0700 and, on prune, remove the snapshots in it; use a directory of its own such as /var/lib/kubeboot/etcd-snapshots`),
	refusedInit("33.7", "certificates.dir /etc/ssl/private", "certificates: {dir: /etc/ssl/private}\n",
		`certificates.dir: Invalid value: "/etc/ssl/private": inside /etc, which belongs to the system and its users`),
	refusedInit("33.7", "etcd.local.snapshotsDir in restore's old data dir", "etcd: {local: {snapshotsDir: /var/lib/etcd.before-restore}}\n",
		`etcd.local.snapshotsDir: Invalid value: "/var/lib/etcd.before-restore": /var/lib/etcd.before-restore would be both the etcd snapshot directory and the directory etcd restore keeps the old data dir in`),
	refusedInit("33.7", "etcd.local.snapshotsDir in restore's new data dir", "etcd: {local: {snapshotsDir: /var/lib/etcd.restoring/snapshots}}\n",
		`would lie inside the directory etcd restore writes the new data dir into /var/lib/etcd.restoring (under etcd.local.dataDir), where it has no place`),
	{
		defect: "33.7", name: "etcd snapshot schedule --dir /tmp is refused before anything runs",
		setup: func(e env) []string {
			return []string{"etcd", "snapshot", "schedule", "--endpoint", "https://127.0.0.1:1", "--cacert", e.path("ca.crt"), "--cert", e.path("c.crt"), "--key", e.path("c.key"), "--dir", "/tmp"}
		},
		code: 2, message: "--dir /tmp: a system directory: kubeboot would make it 0700", within: 2 * time.Second,
		check: func(e env, _ result) {
			if m := mode(e.t, "/tmp"); m.Perm() != 0o777 {
				e.t.Errorf("/tmp is %v", m)
			}
		},
	},

	// Class 6: values checked against what consumes them.
	refusedInit("27.6", "kubelet.extraConfig failSwapOn: notabool", "kubelet: {extraConfig: {failSwapOn: notabool}}\n",
		`kubelet.extraConfig.failSwapOn: Invalid value: "string": wrong type: the kubelet wants bool`),
	refusedInit("27.6", "kubelet.extraConfig unknown field", "kubelet: {extraConfig: {failswapon: false}}\n",
		"kubelet.extraConfig.failswapon: Invalid value: \"\": not a KubeletConfiguration (kubelet.config.k8s.io/v1beta1) field"),
	refusedInit("27.6", "networking.serviceSubnet /29", "networking: {serviceSubnet: 10.96.0.0/29}\n",
		`networking.serviceSubnet: Invalid value: "10.96.0.0/29": too small: kubeboot takes the first address (10.96.0.1, the API server's Service) and the tenth (10.96.0.10`),
	refusedInit("27.6", "dual-stack serviceSubnet with an IPv6 /126", "networking: {serviceSubnet: '10.96.0.0/16,fd00:10:96::/126', podSubnet: '10.244.0.0/16,fd00:10:244::/56'}\n",
		`networking.serviceSubnet: Invalid value: "fd00:10:96::/126": too small`),
	refusedInit("27.6", "imageRepository registry.k8s.io/../evil", "imageRepository: registry.k8s.io/../evil\n",
		`imageRepository: Invalid value: "registry.k8s.io/../evil": ".." is not a repository path component`),
	refusedInit("27.6", "certificates.leafValidity 1ms", "certificates: {leafValidity: 1ms}\n",
		`certificates.leafValidity: Invalid value: "1ms": too short: at least 1h`),
}

func TestHostilePaths(t *testing.T) { runRows(t, pathRows) }
