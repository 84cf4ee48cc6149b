package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/pki"
)

// ImportSecrets writes the cluster secrets of a bundle into
// certificates.dir. It converges: a file that already holds the bundle's
// content is left alone. It writes nothing if the bundle is incomplete,
// holds an unexpected name, or any file on the node differs from it,
// because a node with other CAs belongs to another cluster.
func ImportSecrets(s *phases.Node, files map[string][]byte) error {
	want := phases.SharedFiles(s.Config)
	var problems []string
	for name := range files {
		if !slices.ContainsFunc(want, func(f phases.SharedFile) bool { return f.Name == name }) {
			problems = append(problems, fmt.Sprintf("%s: not a file a bundle carries", name))
		}
	}
	for _, f := range want {
		path := filepath.Join(s.Config.Certificates.Dir, f.Name)
		data, ok := files[f.Name]
		if !ok {
			if !f.Optional {
				problems = append(problems, f.Name+": missing from the bundle")
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
	if err := phases.CheckClusterSecrets(s.Config, files); err != nil {
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
		if data, ok := files[f.Name]; ok {
			if err := s.Files.WriteFile(filepath.Join(s.Config.Certificates.Dir, f.Name), data, f.Mode); err != nil {
				return err
			}
		}
	}
	return nil
}
