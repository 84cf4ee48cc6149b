package config

import (
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ScheduledSnapshots makes every control-plane node save a verified
// snapshot of its etcd member on a schedule: the kubeboot-etcd-snapshots
// static pod runs `kubeboot etcd snapshot schedule`, which needs etcd and
// nothing else (no API server), keeps the newest Keep snapshots in
// etcd.local.snapshotsDir and, with S3 set, copies each one off the node.
type ScheduledSnapshots struct {
	// Interval is the time between two snapshots; the first is taken when
	// the pod starts. At least 1m (default 12h).
	Interval metav1.Duration `json:"interval,omitempty"`
	// Keep is how many of the node's newest snapshots that verify are
	// kept, in the snapshot dir and in S3 alike (default 5).
	Keep int `json:"keep,omitempty"`
	// Image is the image the pod's container starts from; it runs the
	// node's own kubeboot, mounted read-only, as `kubeboot etcd snapshot
	// schedule` (default: csrApprover's default, the pause image).
	Image string `json:"image,omitempty"`
	// S3 is where copies go off the node; nil keeps them on it only.
	S3 *S3Storage `json:"s3,omitempty"`
}

// S3Storage is a bucket of an S3-compatible object store. Each node's
// snapshots go to <prefix><node name>/etcd-snapshot-<UTC time>.db.
type S3Storage struct {
	// Endpoint is the store's https URL, like https://s3.example.com or
	// https://10.0.0.9:9000: credentials never cross the network in clear.
	Endpoint string `json:"endpoint"`
	// Bucket is the bucket, which must exist.
	Bucket string `json:"bucket"`
	// Prefix starts every key kubeboot writes, like "clusters/lab/"; empty
	// for none.
	Prefix string `json:"prefix,omitempty"`
	// Region is the bucket's region, empty for the store's default.
	Region string `json:"region,omitempty"`
	// CredentialsFile holds the access key, in the AWS shared credentials
	// format: a [default] section with aws_access_key_id and
	// aws_secret_access_key. The pod mounts it read-only.
	CredentialsFile string `json:"credentialsFile"`
	// CAFile is the CA bundle that signed the endpoint's certificate,
	// empty for the node's system CAs.
	CAFile string `json:"caFile,omitempty"`
}

// Defaults of etcd.local.scheduledSnapshots.
const (
	DefaultSnapshotInterval = 12 * time.Hour
	DefaultSnapshotKeep     = 5
	// MinSnapshotInterval is the shortest interval allowed: a snapshot of
	// a large database takes seconds and loads the member.
	MinSnapshotInterval = time.Minute
)

// NameEtcdSnapshots is the static pod that saves scheduled snapshots.
const NameEtcdSnapshots = "kubeboot-etcd-snapshots"

// ScheduledSnapshotsEnabled says whether this node runs the snapshot pod.
func (c *ClusterConfiguration) ScheduledSnapshotsEnabled() bool {
	return c.Etcd.Local != nil && c.Etcd.Local.ScheduledSnapshots != nil
}

func setScheduledSnapshotsDefaults(s *ScheduledSnapshots, repo string) {
	if s == nil {
		return
	}
	setDuration(&s.Interval, DefaultSnapshotInterval)
	if s.Keep == 0 {
		s.Keep = DefaultSnapshotKeep
	}
	setString(&s.Image, DefaultKubebootPodImage(repo))
}

// bucketName is S3's rule for a bucket name.
var bucketName = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)
})

func validateScheduledSnapshots(p *field.Path, s *ScheduledSnapshots) field.ErrorList {
	if s == nil {
		return nil
	}
	var errs field.ErrorList
	if s.Interval.Duration < MinSnapshotInterval {
		errs = append(errs, field.Invalid(p.Child("interval"), s.Interval.Duration.String(), "at least 1m, like 6h"))
	}
	if s.Keep < 1 {
		errs = append(errs, field.Invalid(p.Child("keep"), s.Keep, "keep at least 1 snapshot"))
	}
	errs = append(errs, validateTaggedImage(p.Child("image"), s.Image, DefaultKubebootPodImage(DefaultImageRepository))...)
	if s.S3 == nil {
		return errs
	}
	p, b := p.Child("s3"), s.S3
	if u, err := url.Parse(b.Endpoint); err != nil || u.Scheme != "https" || u.Host == "" || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.User != nil {
		errs = append(errs, field.Invalid(p.Child("endpoint"), RedactedURL(b.Endpoint), "want the store's https URL with no path, like https://s3.example.com:9000 (the bucket is s3.bucket)"))
	}
	if !bucketName().MatchString(b.Bucket) || strings.Contains(b.Bucket, "..") {
		errs = append(errs, field.Invalid(p.Child("bucket"), b.Bucket, "want an existing bucket's name: 3 to 63 lowercase letters, digits, dots and hyphens"))
	}
	if strings.HasPrefix(b.Prefix, "/") || strings.Contains("/"+b.Prefix+"/", "/../") || strings.Contains("/"+b.Prefix, "/./") {
		errs = append(errs, field.Invalid(p.Child("prefix"), b.Prefix, "a key prefix like clusters/lab/: no leading slash and no . or .. parts"))
	}
	if b.CredentialsFile == "" {
		errs = append(errs, field.Required(p.Child("credentialsFile"), "name the file holding the access key (AWS shared credentials format, [default] section)"))
	} else {
		errs = append(errs, absolutePath(p.Child("credentialsFile"), b.CredentialsFile)...)
	}
	if b.CAFile != "" {
		errs = append(errs, absolutePath(p.Child("caFile"), b.CAFile)...)
	}
	return errs
}
