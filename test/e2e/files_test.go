//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// fileState is what a file held at a snapshot.
type fileState struct {
	data    []byte
	modTime time.Time
	mode    fs.FileMode
}

// ownedDirs are the node's directories kubeboot writes, walked recursively.
var ownedDirs = []string{"pki", "manifests", "kubeboot/staged", "kubelet"}

// snapshot reads every regular file kubeboot writes for the node: the PKI,
// the manifests, the staged manifests, the kubelet config and the
// kubeconfigs (the regular files directly in the node's directory).
func (n *node) snapshot() (map[string]fileState, error) {
	files := map[string]fileState{}
	add := func(path string) error {
		info, err := os.Lstat(path)
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files[path] = fileState{data: data, modTime: info.ModTime(), mode: info.Mode()}
		return nil
	}
	entries, err := os.ReadDir(n.dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if err := add(filepath.Join(n.dir, e.Name())); err != nil {
			return nil, err
		}
	}
	for _, dir := range ownedDirs {
		err := filepath.WalkDir(n.path(dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return nil
			}
			return add(path)
		})
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}

// snapshotDiff lists how two snapshots differ: files added, removed,
// rewritten (content, mode, or only the modification time).
func snapshotDiff(before, after map[string]fileState) []string {
	var diffs []string
	for path, b := range before {
		a, ok := after[path]
		switch {
		case !ok:
			diffs = append(diffs, "removed "+path)
		case !bytes.Equal(a.data, b.data):
			diffs = append(diffs, "content changed: "+path)
		case a.mode != b.mode:
			diffs = append(diffs, fmt.Sprintf("mode changed from %v to %v: %s", b.mode, a.mode, path))
		case !a.modTime.Equal(b.modTime):
			diffs = append(diffs, fmt.Sprintf("rewritten with the same content (mtime %s -> %s): %s",
				b.modTime.Format(time.RFC3339Nano), a.modTime.Format(time.RFC3339Nano), path))
		}
	}
	for path := range after {
		if _, ok := before[path]; !ok {
			diffs = append(diffs, "added "+path)
		}
	}
	slices.Sort(diffs)
	return diffs
}
