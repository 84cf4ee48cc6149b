package phases

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/templates"
)

// sharedCAs are the CAs every control-plane node of a cluster must hold
// with their keys, so that each issues its own leaves from the same roots.
var sharedCAs = []string{config.CertCA, config.CertFrontProxyCA, config.CertEtcdCA}

// SharedFile is one file of the cluster secrets, named relative to
// certificates.dir in a bundle.
type SharedFile struct {
	// Name is the file's path relative to certificates.dir.
	Name string
	// Mode is the mode it is written with.
	Mode fs.FileMode
	// Optional files, such as the encryption config, may be absent.
	Optional bool
}

// SharedFiles lists the cluster secrets, what a certificate bundle and the
// kubeadm-certs Secret carry, keys first so an
// import never leaves a certificate without its key.
func SharedFiles(c *config.ClusterConfiguration) []SharedFile {
	var files []SharedFile
	for _, ca := range sharedCAs {
		if ca == config.CertEtcdCA && c.Etcd.Local == nil {
			continue
		}
		files = append(files, SharedFile{Name: ca + ".key", Mode: pki.ModeKey})
	}
	files = append(files, SharedFile{Name: config.KeyServiceAccount + ".key", Mode: pki.ModeKey})
	for _, ca := range sharedCAs {
		if ca == config.CertEtcdCA && c.Etcd.Local == nil {
			continue
		}
		files = append(files, SharedFile{Name: ca + ".crt", Mode: pki.ModeCert})
	}
	// Every API server must decrypt what any other one encrypted.
	return append(files,
		SharedFile{Name: config.KeyServiceAccount + ".pub", Mode: pki.ModeCert},
		SharedFile{Name: config.FileEncryptionConfig, Mode: APIServerFileMode, Optional: true})
}

// ClusterSecrets reads the cluster secrets a joining control-plane node
// needs, by bundle name. Every CA must have its key: a node with an
// external CA has nothing to share.
func ClusterSecrets(s *Node) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, f := range SharedFiles(s.Config) {
		path := filepath.Join(s.Config.Certificates.Dir, f.Name)
		data, err := s.Files.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist) && f.Optional:
			continue
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("export %q: not found: run `kubeboot init phase certs` first (a CA without its key cannot be shared)", path)
		case err != nil:
			return nil, fmt.Errorf("export %q: %w", path, err)
		}
		out[f.Name] = data
	}
	return out, CheckClusterSecrets(s.Config, out)
}

// CheckClusterSecrets checks every file of a bundle as the phases that read them
// will, so a bundle never carries, or an import never writes, what a later
// phase refuses: each CA certificate must be a CA, valid now and paired
// with its key, sa.pub must be the public half of sa.key, and an
// encryption config must be one the API server starts with.
func CheckClusterSecrets(c *config.ClusterConfiguration, files map[string][]byte) error {
	var errs []error
	now := time.Now()
	for _, spec := range pki.CertSpecs(c) {
		if !slices.Contains(sharedCAs, spec.Name) {
			continue
		}
		pair := pki.KeyPair{Cert: files[spec.Name+".crt"], Key: files[spec.Name+".key"]}
		if _, err := tls.X509KeyPair(pair.Cert, pair.Key); err != nil {
			errs = append(errs, fmt.Errorf("check CA %q: its certificate and key do not form a pair: %w", spec.Name, err))
			continue
		}
		if err := pki.Check(spec, pair, nil, now, 0); err != nil {
			errs = append(errs, fmt.Errorf("check CA %q: %w", spec.Name, err))
		}
	}
	sa := pki.ServiceAccountKey{Private: files[config.KeyServiceAccount+".key"], Public: files[config.KeyServiceAccount+".pub"]}
	if err := pki.CheckServiceAccountKey(sa); err != nil {
		errs = append(errs, fmt.Errorf("check service-account key %q: %w", config.KeyServiceAccount+".key", err))
	}
	if data, ok := files[config.FileEncryptionConfig]; ok {
		if _, err := templates.CheckEncryptionConfig(data); err != nil {
			errs = append(errs, fmt.Errorf("check encryption config %q: %w", config.FileEncryptionConfig, err))
		}
	}
	return errors.Join(errs...)
}
