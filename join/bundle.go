package join

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/templates"
)

// sharedCAs are the CAs every control-plane node of a cluster must hold
// with their keys, so that each issues its own leaves from the same roots.
var sharedCAs = []string{config.CertCA, config.CertFrontProxyCA, config.CertEtcdCA}

// sharedFile is one file of the cluster secrets, named relative to
// certificates.dir in a bundle.
type sharedFile struct {
	name string
	mode fs.FileMode
	// optional files, such as the encryption config, may be absent.
	optional bool
}

// sharedFiles lists what a certificate bundle carries, keys first so an
// import never leaves a certificate without its key.
func sharedFiles(c *config.ClusterConfiguration) []sharedFile {
	var files []sharedFile
	for _, ca := range sharedCAs {
		if ca == config.CertEtcdCA && c.Etcd.Local == nil {
			continue
		}
		files = append(files, sharedFile{name: ca + ".key", mode: pki.ModeKey})
	}
	files = append(files, sharedFile{name: config.KeyServiceAccount + ".key", mode: pki.ModeKey})
	for _, ca := range sharedCAs {
		if ca == config.CertEtcdCA && c.Etcd.Local == nil {
			continue
		}
		files = append(files, sharedFile{name: ca + ".crt", mode: pki.ModeCert})
	}
	// Every API server must decrypt what any other one encrypted.
	return append(files,
		sharedFile{name: config.KeyServiceAccount + ".pub", mode: pki.ModeCert},
		sharedFile{name: config.FileEncryptionConfig, mode: phases.APIServerFileMode, optional: true})
}

// ExportSecrets reads the cluster secrets a joining control-plane node
// needs, by bundle name. Every CA must have its key: a node with an
// external CA has nothing to share.
func ExportSecrets(s *phases.Node) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, f := range sharedFiles(s.Config) {
		path := filepath.Join(s.Config.Certificates.Dir, f.name)
		data, err := s.Files.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist) && f.optional:
			continue
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("export %q: not found: run `kubeboot init phase certs` first (a CA without its key cannot be shared)", path)
		case err != nil:
			return nil, fmt.Errorf("export %q: %w", path, err)
		}
		out[f.name] = data
	}
	return out, checkSecrets(s.Config, out)
}

// checkSecrets checks every file of a bundle as the phases that read them
// will, so a bundle never carries, or an import never writes, what a later
// phase refuses: each CA certificate must be a CA, valid now and paired
// with its key, sa.pub must be the public half of sa.key, and an
// encryption config must be one the API server starts with.
func checkSecrets(c *config.ClusterConfiguration, files map[string][]byte) error {
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

// ImportSecrets writes the cluster secrets of a bundle into
// certificates.dir. It converges: a file that already holds the bundle's
// content is left alone. It writes nothing if the bundle is incomplete,
// holds an unexpected name, or any file on the node differs from it,
// because a node with other CAs belongs to another cluster.
func ImportSecrets(s *phases.Node, files map[string][]byte) error {
	want := sharedFiles(s.Config)
	var problems []string
	for name := range files {
		if !slices.ContainsFunc(want, func(f sharedFile) bool { return f.name == name }) {
			problems = append(problems, fmt.Sprintf("%s: not a file a bundle carries", name))
		}
	}
	for _, f := range want {
		path := filepath.Join(s.Config.Certificates.Dir, f.name)
		data, ok := files[f.name]
		if !ok {
			if !f.optional {
				problems = append(problems, f.name+": missing from the bundle")
			}
			continue
		}
		have, err := s.Files.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return fmt.Errorf("read %q: %w", path, err)
		case !bytes.Equal(have, data):
			problems = append(problems, fmt.Sprintf("%s: exists and differs from the bundle (this node has other cluster secrets: reset it first)", path))
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return fmt.Errorf("import certificate bundle:\n  %s", strings.Join(problems, "\n  "))
	}
	if err := checkSecrets(s.Config, files); err != nil {
		return fmt.Errorf("import certificate bundle: %w", err)
	}
	dirs := []string{s.Config.Certificates.Dir}
	if s.Config.Etcd.Local != nil {
		dirs = append(dirs, filepath.Dir(s.Config.CertPath(config.CertEtcdCA)))
	}
	for _, dir := range dirs {
		if err := s.Files.MkdirAll(dir, pki.ModeDir); err != nil {
			return err
		}
	}
	for _, f := range want {
		if data, ok := files[f.name]; ok {
			if err := s.Files.WriteFile(filepath.Join(s.Config.Certificates.Dir, f.name), data, f.mode); err != nil {
				return err
			}
		}
	}
	return nil
}
