package config

import (
	"testing"
)

// TestEtcdSnapshotsDir: the snapshot directory defaults to one of its own,
// and is refused when relative, a system directory or in a system tree, or
// where another owned path is, above all inside the etcd data dir, which
// reset removes, or inside the directories etcd restore replaces.
func TestEtcdSnapshotsDir(t *testing.T) {
	tests := []struct {
		dir  string
		want string // "" for valid
	}{
		{"", ""}, // the default
		{"/srv/etcd-snapshots", ""},
		{"/etc/kubernetes/etcd-snapshots", ""},
		{"snapshots", `etcd.local.snapshotsDir: Invalid value: "snapshots": must be an absolute path`},
		{"/srv/snapshots/", `etcd.local.snapshotsDir: Invalid value: "/srv/snapshots/": not clean: use /srv/snapshots`},
		{"/var/lib", `etcd.local.snapshotsDir: Invalid value: "/var/lib": a system directory: kubeboot would make it 0700 and, on prune, remove the snapshots in it; use a directory of its own such as /var/lib/kubeboot/etcd-snapshots`},
		{"/var/lib/etcd/snapshots", `etcd.local.snapshotsDir: Invalid value: "/var/lib/etcd/snapshots": /var/lib/etcd/snapshots (the etcd snapshot directory) would lie inside the etcd data directory /var/lib/etcd (etcd.local.dataDir), where it has no place: reset removes it with everything in it`},
		{"/var/lib/etcd", `etcd.local.snapshotsDir: Invalid value: "/var/lib/etcd": /var/lib/etcd would be both the etcd snapshot directory and the etcd data directory (etcd.local.dataDir); give it a directory of its own such as /var/lib/kubeboot/etcd-snapshots`},
		{"/etc/kubernetes/pki/snapshots", `etcd.local.snapshotsDir: Invalid value: "/etc/kubernetes/pki/snapshots": /etc/kubernetes/pki/snapshots (the etcd snapshot directory) would lie inside the certificates directory`},
		{"/var/lib/etcd.before-restore", `etcd.local.snapshotsDir: Invalid value: "/var/lib/etcd.before-restore": /var/lib/etcd.before-restore would be both the etcd snapshot directory and the directory etcd restore keeps the old data dir in (under etcd.local.dataDir); give it a directory of its own such as /var/lib/kubeboot/etcd-snapshots`},
		{"/var/lib/etcd.restoring/snapshots", `etcd.local.snapshotsDir: Invalid value: "/var/lib/etcd.restoring/snapshots": /var/lib/etcd.restoring/snapshots (the etcd snapshot directory) would lie inside the directory etcd restore writes the new data dir into /var/lib/etcd.restoring (under etcd.local.dataDir), where it has no place: etcd restore removes it with everything in it before it writes the new data dir there`},
		{"/var/lib/etcd.before-restore/s", "would lie inside the directory etcd restore keeps the old data dir in /var/lib/etcd.before-restore (under etcd.local.dataDir), where it has no place: etcd restore moves the old data dir there, then removes it with everything in it"},
		{"/var/lib/etcd.left/s", "would lie inside the directory a rejoin keeps the data of a member its cluster left in /var/lib/etcd.left (under etcd.local.dataDir), where it has no place: a control-plane join moves a left member's data dir there, then removes it with everything in it"},
		{"/var/lib/etcd.snapshots", ""},
		{"/etc/ssl/certs", `etcd.local.snapshotsDir: Invalid value: "/etc/ssl/certs": inside /etc, which belongs to the system and its users: kubeboot would make it 0700`},
		{"/etc/kubernetes/manifests", `etcd.local.snapshotsDir: Invalid value: "/etc/kubernetes/manifests": /etc/kubernetes/manifests would be both the etcd snapshot directory and the manifest directory`},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			c := New()
			c.Etcd.Local = &LocalEtcd{SnapshotsDir: tt.dir}
			SetDefaults(c, testHost)
			if tt.dir == "" && c.Etcd.Local.SnapshotsDir != DefaultEtcdSnapshotsDir {
				t.Fatalf("default = %q", c.Etcd.Local.SnapshotsDir)
			}
			errs := Validate(c)
			wantOneError(t, errs, tt.want)
		})
	}
}
