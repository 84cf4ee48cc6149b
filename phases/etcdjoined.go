package phases

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/health"
	"github.com/kubeboot/kubeboot/staticpod"
)

// InitialClusterOnDisk returns the --initial-cluster of the etcd manifest
// on the node, if any: a re-run keeps it, so the manifest is not rewritten
// (which would restart etcd) just because members joined since.
func InitialClusterOnDisk(s *State) (string, error) {
	data, err := s.Files.ReadFile(s.Config.ManifestPath(config.NameEtcd))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read etcd manifest %q: %w", s.Config.ManifestPath(config.NameEtcd), err)
	}
	pod, err := DecodePod(s.Config.ManifestPath(config.NameEtcd), data)
	if err != nil {
		return "", err
	}
	flags := health.CommandFlags(pod, config.NameEtcd)
	if flags["initial-cluster-state"] != "existing" {
		return "", nil
	}
	return flags["initial-cluster"], nil
}

// KeepJoinedEtcdFlags makes a node whose etcd member joined an existing
// cluster render its etcd manifest as join did: with the --initial-cluster
// and --initial-cluster-state=existing of the manifest on disk. Without
// them the manifest would differ from the running one, and a re-rendered
// member would be told to found a new cluster. Commands that re-render a
// node (diff, upgrade apply) call it before rendering; it does nothing on
// the node that founded the cluster or with an external etcd, and keeps a
// flag the configuration sets (or removes) itself.
func KeepJoinedEtcdFlags(s *State) error {
	local := s.Config.Etcd.Local
	if local == nil {
		return nil
	}
	cluster, err := InitialClusterOnDisk(s)
	if err != nil || cluster == "" {
		return err
	}
	for _, arg := range []config.Arg{{Name: "initial-cluster", Value: cluster}, {Name: "initial-cluster-state", Value: "existing"}} {
		if !slices.ContainsFunc(local.ExtraArgs, func(a config.Arg) bool { return a.Name == arg.Name }) {
			local.ExtraArgs = append(local.ExtraArgs, arg)
		}
	}
	return nil
}

// WriteStaged validates and writes the named staged manifests alone, so
// etcd can start and join before the rest of the control plane.
func WriteStaged(s *State, names ...string) error {
	if err := s.Files.MkdirAll(s.Config.Paths.ManifestsDir, ManifestDirMode); err != nil {
		return err
	}
	for _, name := range names {
		data, err := s.Files.ReadFile(stagedPath(s.Config, name))
		if err != nil {
			return fmt.Errorf("read staged manifest %q: %w", stagedPath(s.Config, name), err)
		}
		if err := staticpod.Err([]staticpod.Result{staticpod.Validate(name+".yaml", data, s.Config.Node.Name)}); err != nil {
			return err
		}
		if err := s.Files.WriteFile(s.Config.ManifestPath(name), data, ManifestMode); err != nil {
			return err
		}
	}
	return nil
}
