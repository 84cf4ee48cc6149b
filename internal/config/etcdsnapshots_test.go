package config

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestScheduledSnapshots: the schedule is off unless set, defaults to
// every 12h keeping 5 with the kubeboot image, and each field that would
// not work is refused with the fix in its message.
func TestScheduledSnapshots(t *testing.T) {
	off := New()
	SetDefaults(off, testHost)
	if off.ScheduledSnapshotsEnabled() || off.KubebootPodEnabled(NameEtcdSnapshots) {
		t.Fatal("scheduled snapshots are on without etcd.local.scheduledSnapshots")
	}

	on := New()
	on.Etcd.Local = &LocalEtcd{ScheduledSnapshots: &ScheduledSnapshots{}}
	SetDefaults(on, testHost)
	s := on.Etcd.Local.ScheduledSnapshots
	if !on.KubebootPodEnabled(NameEtcdSnapshots) || s.Interval.Duration != 12*time.Hour || s.Keep != 5 || s.Image != "registry.k8s.io/pause:3.10.2" {
		t.Fatalf("defaults: %+v", s)
	}
	if errs := Validate(on); len(errs) > 0 {
		t.Fatalf("defaults do not validate: %v", errs)
	}

	good := func() *S3Storage {
		return &S3Storage{Endpoint: "https://10.0.0.9:9000", Bucket: "backups", Prefix: "clusters/lab/", CredentialsFile: "/etc/kubeboot/s3-credentials", CAFile: "/etc/kubeboot/s3-ca.crt"}
	}
	tests := []struct {
		name   string
		change func(*ScheduledSnapshots)
		want   string // "" for valid
	}{
		{"s3", func(s *ScheduledSnapshots) { s.S3 = good() }, ""},
		{"s3 without prefix or CA", func(s *ScheduledSnapshots) { s.S3 = good(); s.S3.Prefix, s.S3.CAFile = "", "" }, ""},
		{"too often", func(s *ScheduledSnapshots) { s.Interval = metav1.Duration{Duration: 30 * time.Second} },
			`etcd.local.scheduledSnapshots.interval: Invalid value: "30s": at least 1m, like 6h`},
		{"keep none", func(s *ScheduledSnapshots) { s.Keep = -1 },
			`etcd.local.scheduledSnapshots.keep: Invalid value: -1: keep at least 1 snapshot`},
		{"untagged image", func(s *ScheduledSnapshots) { s.Image = "kubeboot.io/kubeboot" },
			`etcd.local.scheduledSnapshots.image: Invalid value: "kubeboot.io/kubeboot": name a tag or a digest`},
		{"http endpoint", func(s *ScheduledSnapshots) { s.S3 = good(); s.S3.Endpoint = "http://10.0.0.9:9000" },
			`etcd.local.scheduledSnapshots.s3.endpoint: Invalid value: "http://10.0.0.9:9000": want the store's https URL`},
		{"endpoint with the bucket", func(s *ScheduledSnapshots) { s.S3 = good(); s.S3.Endpoint = "https://s3.example.com/backups" },
			`(the bucket is s3.bucket)`},
		{"bucket", func(s *ScheduledSnapshots) { s.S3 = good(); s.S3.Bucket = "My_Bucket" },
			`etcd.local.scheduledSnapshots.s3.bucket: Invalid value: "My_Bucket": want an existing bucket's name`},
		{"prefix with ..", func(s *ScheduledSnapshots) { s.S3 = good(); s.S3.Prefix = "a/../b/" },
			`etcd.local.scheduledSnapshots.s3.prefix: Invalid value: "a/../b/": a key prefix like clusters/lab/`},
		{"absolute prefix", func(s *ScheduledSnapshots) { s.S3 = good(); s.S3.Prefix = "/lab/" },
			`etcd.local.scheduledSnapshots.s3.prefix: Invalid value: "/lab/"`},
		{"no credentials", func(s *ScheduledSnapshots) { s.S3 = good(); s.S3.CredentialsFile = "" },
			`etcd.local.scheduledSnapshots.s3.credentialsFile: Required value: name the file holding the access key`},
		{"relative credentials", func(s *ScheduledSnapshots) { s.S3 = good(); s.S3.CredentialsFile = "creds" },
			`etcd.local.scheduledSnapshots.s3.credentialsFile: Invalid value: "creds": must be an absolute path`},
		{"relative CA", func(s *ScheduledSnapshots) { s.S3 = good(); s.S3.CAFile = "ca.crt" },
			`etcd.local.scheduledSnapshots.s3.caFile: Invalid value: "ca.crt": must be an absolute path`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New()
			c.Etcd.Local = &LocalEtcd{ScheduledSnapshots: &ScheduledSnapshots{}}
			SetDefaults(c, testHost)
			tt.change(c.Etcd.Local.ScheduledSnapshots)
			wantOneError(t, Validate(c), tt.want)
		})
	}
}
