// Package s3store keeps etcd snapshots in a bucket of an S3-compatible
// object store, off the node: upload, list, download and remove, through
// minio-go over TLS 1.2 or later, with path-style addressing so that an
// endpoint given by IP address works. A download never leaves a
// half-written file.
package s3store

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/kubeboot/kubeboot/internal/atomicfile"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/inputfile"
)

const (
	// field is the configuration's path to the bucket, which errors name.
	field = "etcd.local.scheduledSnapshots.s3"
	// maxRetries bounds minio-go's retries of a failed request (its
	// default is 10), so that an unreachable store fails in seconds.
	maxRetries = 3
	// fileMode is a downloaded snapshot's mode: it holds every Secret.
	fileMode = 0o600
)

// Store is one bucket of an S3-compatible object store.
type Store struct {
	client   *minio.Client
	endpoint string
	bucket   string
}

// Object is an object of the bucket.
type Object struct {
	// Key is the object's full key.
	Key string
	// Size is its size in bytes.
	Size int64
	// Modified is when the store last wrote it.
	Modified time.Time
}

// Open connects to the bucket cfg names; nothing crosses the network
// until the first operation. hostPath maps a node path of the
// configuration (the credentials and CA files) to this machine's. A
// credentials or CA file that cannot be read or holds no usable key or
// certificate is a configuration error naming the file and its field.
func Open(cfg config.S3Storage, hostPath func(string) string) (*Store, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || u.Scheme != "https" || u.Host == "" || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, &exit.UsageError{Msg: fmt.Sprintf("%s.endpoint: %s is not the store's https URL: want https://<host>[:<port>] with no path, query, fragment or credentials, like https://s3.example.com:9000 (the access key goes in %s.credentialsFile)", field, redacted(cfg.Endpoint), field)}
	}
	creds, err := readCredentials(hostPath(cfg.CredentialsFile))
	if err != nil {
		return nil, err
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		if tlsConfig.RootCAs, err = readCA(hostPath(cfg.CAFile)); err != nil {
			return nil, err
		}
	}
	transport, err := minio.DefaultTransport(true)
	if err != nil {
		return nil, fmt.Errorf("s3 endpoint %s: %w", cfg.Endpoint, err)
	}
	transport.TLSClientConfig = tlsConfig
	client, err := minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(creds.accessKeyID, creds.secretKey, creds.sessionToken),
		Secure:       true,
		Transport:    transport,
		Region:       cfg.Region,
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   maxRetries,
	})
	if err != nil {
		return nil, &exit.UsageError{Msg: fmt.Sprintf("%s.endpoint %s: %v", field, cfg.Endpoint, err)}
	}
	return &Store{client: client, endpoint: cfg.Endpoint, bucket: cfg.Bucket}, nil
}

// redacted is the endpoint raw as an error may show it (config.RedactedURL,
// quoted): a raw that is no URL of the form scheme://host is not shown.
func redacted(raw string) string {
	shown := config.RedactedURL(raw)
	if shown == config.Hidden {
		return "(not shown: it is no URL of the form scheme://host and may hold a secret)"
	}
	return strconv.Quote(shown)
}

// URL is the s3:// URL of key in the bucket, as ParseURL reads it.
func (s *Store) URL(key string) string {
	return "s3://" + s.bucket + "/" + key
}

// Upload stores the regular file at localPath, a snapshot of at most
// inputfile.SnapshotLimit bytes, as key, replacing any object of that
// key, and checks that the store holds all its bytes. Anything but a
// regular file is refused without waiting on it.
func (s *Store) Upload(ctx context.Context, localPath, key string) (Object, error) {
	if err := checkKey(key); err != nil {
		return Object{}, fmt.Errorf("upload %s: %w", localPath, err)
	}
	f, err := inputfile.Open(localPath, inputfile.SnapshotLimit)
	if err != nil {
		return Object{}, fmt.Errorf("upload to %s: %w", s.URL(key), err)
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return Object{}, fmt.Errorf("upload to %s: %w", s.URL(key), err)
	}
	op := "upload " + localPath + " to"
	if _, err := s.client.PutObject(ctx, s.bucket, key, f, st.Size(), minio.PutObjectOptions{ContentType: "application/octet-stream"}); err != nil {
		return Object{}, s.fail(op, key, err)
	}
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return Object{}, s.fail(op, key, err)
	}
	if info.Size != st.Size() {
		return Object{}, fmt.Errorf("%s %s at %s: the store holds %d bytes of %d", op, s.URL(key), s.endpoint, info.Size, st.Size())
	}
	return Object{Key: key, Size: info.Size, Modified: info.LastModified}, nil
}

// List returns the objects whose key starts with prefix, at any depth,
// newest first (of two written in the same second, the greater key
// first, which is the newer of kubeboot's timestamped snapshot names).
// prefix is empty or ends in a key's folder (a /); an object the store
// lists whose key is not under prefix or is no key Upload would take (a
// .. in it) is left out, so that no caller acts on it.
func (s *Store) List(ctx context.Context, prefix string) ([]Object, error) {
	if prefix != "" {
		if err := checkKey(strings.TrimSuffix(prefix, "/")); err != nil {
			return nil, fmt.Errorf("list: the prefix: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends minio-go's listing if an error stops the loop
	var objects []Object
	for o := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, s.fail("list", prefix, o.Err)
		}
		if !strings.HasPrefix(o.Key, prefix) || checkKey(o.Key) != nil {
			continue
		}
		objects = append(objects, Object{Key: o.Key, Size: o.Size, Modified: o.LastModified})
	}
	slices.SortFunc(objects, func(a, b Object) int {
		if c := b.Modified.Compare(a.Modified); c != 0 {
			return c
		}
		return strings.Compare(b.Key, a.Key)
	})
	return objects, nil
}

// Download writes the object key to localPath: into a temp file in
// localPath's directory, synced, then renamed over localPath with mode
// 0600 and the directory synced. On any failure the temp file is removed
// and localPath is as it was.
func (s *Store) Download(ctx context.Context, key, localPath string) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("download: %w", err)
	}
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return s.fail("download", key, err)
	}
	defer func() { _ = obj.Close() }()
	info, err := obj.Stat()
	if err != nil {
		return s.fail("download", key, err)
	}
	if err := writeFile(obj, info.Size, localPath); err != nil {
		return s.fail("download", key, err)
	}
	return nil
}

// Remove deletes the object key; a key the bucket does not hold is no
// error, as in S3.
func (s *Store) Remove(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	if err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return s.fail("remove", key, err)
	}
	return nil
}

// fail wraps err of the operation op on key with the key's URL and the
// endpoint.
func (s *Store) fail(op, key string, err error) error {
	return fmt.Errorf("%s %s at %s: %w", op, s.URL(key), s.endpoint, err)
}

// writeFile streams size bytes of r to path atomically (package
// atomicfile): on any failure, short read included, the temp file is
// removed and path is as it was.
func writeFile(r io.Reader, size int64, path string) error {
	f, err := atomicfile.Create(path, fileMode)
	if err != nil {
		return err
	}
	defer f.Abort()
	n, err := io.Copy(f, r)
	if err != nil {
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	if n != size {
		return fmt.Errorf("write %s: got %d bytes of %d", f.Name(), n, size)
	}
	return f.Commit()
}

// ParseURL splits an s3://<bucket>/<key> URL, as URL gives, into its
// bucket and key. Anything else is a usage error that shows the form.
func ParseURL(raw string) (bucket, key string, err error) {
	rest, ok := strings.CutPrefix(raw, "s3://")
	if !ok {
		return "", "", &exit.UsageError{Msg: fmt.Sprintf("%q is not an s3:// URL: want s3://<bucket>/<key>, like s3://backups/node-1/etcd-snapshot-20260101T000000.000Z.db", raw)}
	}
	bucket, key, _ = strings.Cut(rest, "/")
	switch {
	case bucket == "":
		return "", "", &exit.UsageError{Msg: fmt.Sprintf("%q names no bucket: want s3://<bucket>/<key>", raw)}
	case key == "" || strings.HasSuffix(key, "/"):
		return "", "", &exit.UsageError{Msg: fmt.Sprintf("%q names no object: want s3://<bucket>/<key>, the key of one object", raw)}
	}
	if err := checkKey(key); err != nil {
		return "", "", &exit.UsageError{Msg: fmt.Sprintf("%q: %v", raw, err)}
	}
	return bucket, key, nil
}

// checkKey refuses an object key that a store or a proxy on the way could
// resolve to another object than the one it names, even in another
// bucket: one with an empty, . or .. part between its slashes (a leading
// or a double slash, ./ or ../).
func checkKey(key string) error {
	for part := range strings.SplitSeq(key, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("key %q has an empty, . or .. part: want a plain key like node-1/etcd-snapshot-20260101T000000.000Z.db, with no leading or double slash, ./ or ../", key)
		}
	}
	return nil
}
