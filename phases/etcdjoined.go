package phases

import (
	"fmt"

	"github.com/kubeboot/kubeboot/internal/staticpod"
)

// WriteStaged validates and writes the named staged manifests alone, so
// etcd can start and join before the rest of the control plane.
func WriteStaged(s *Node, names ...string) error {
	if err := s.Files.MkdirAll(s.Config.Paths.ManifestsDir, ManifestDirMode); err != nil {
		return err
	}
	for _, name := range names {
		data, err := s.Files.ReadFile(stagedPath(s.Config, name))
		if err != nil {
			return fmt.Errorf("read staged manifest %q: %w", stagedPath(s.Config, name), err)
		}
		if err := staticpod.Err([]staticpod.Result{s.ValidateManifest(name+".yaml", data)}); err != nil {
			return err
		}
		if err := s.Files.WriteFile(s.Config.ManifestPath(name), data, ManifestMode); err != nil {
			return err
		}
	}
	return nil
}
