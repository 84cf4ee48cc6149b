package phases

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/files"
	"github.com/kubeboot/kubeboot/internal/inputfile"
)

// readPatches reads only regular patch files of a trusted owner, bounded,
// and never blocks: each case must fail at once with an error naming the
// file.
func TestReadPatchesRefusesHostileFiles(t *testing.T) {
	const name = "kube-apiserver.yaml"
	tests := []struct {
		name string
		// make creates the patch file at path.
		make func(t *testing.T, path string)
		want error
		msg  string
	}{
		{"fifo", func(t *testing.T, path string) { must(t, syscall.Mkfifo(path, 0o600)) }, inputfile.ErrNotRegular, "FIFO"},
		{"symlink to /dev/zero", func(t *testing.T, path string) { must(t, os.Symlink("/dev/zero", path)) }, nil, ""},
		{"too large", func(t *testing.T, path string) {
			must(t, os.WriteFile(path, nil, 0o600))
			must(t, os.Truncate(path, inputfile.PatchLimit+1))
		}, inputfile.ErrTooLarge, "1 MiB"},
		{"symlink to a root-owned file outside the patches dir", func(t *testing.T, path string) {
			secret := filepath.Join(t.TempDir(), "shadow")
			must(t, os.WriteFile(secret, []byte("root:$6$secret:19000::::::\n"), 0o600))
			must(t, os.Symlink(secret, path))
		}, nil, ""},
		{"foreign owner", func(t *testing.T, path string) {
			if os.Getuid() != 0 {
				t.Skip("needs root to give a file away")
			}
			must(t, os.WriteFile(path, []byte("[]"), 0o644))
			must(t, os.Chown(path, 4242, 4242))
		}, nil, "owned by uid 4242"},
	}
	for _, rooted := range []bool{true, false} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("rooted=%v/%s", rooted, tt.name), func(t *testing.T) {
				root := t.TempDir()
				s := manifestState(t, root, "v1.36.3")
				s.Config.PatchesDir = "/etc/kubeboot/patches"
				if !rooted {
					s.Config.PatchesDir = filepath.Join(root, s.Config.PatchesDir)
					s.Files = &files.AtomicWriter{}
				}
				must(t, os.MkdirAll(s.Files.HostPath(s.Config.PatchesDir), 0o755))
				tt.make(t, filepath.Join(s.Files.HostPath(s.Config.PatchesDir), name))
				done := make(chan error, 1)
				go func() { _, err := readPatches(s); done <- err }()
				var err error
				select {
				case err = <-done:
				case <-time.After(5 * time.Second):
					t.Fatal("readPatches blocked for 5s")
				}
				if err == nil || !strings.Contains(err.Error(), filepath.Join(s.Config.PatchesDir, name)) || !strings.Contains(err.Error(), tt.msg) {
					t.Fatalf("rooted %v: want an error naming the patch and %q, got %v", rooted, tt.msg, err)
				}
				if tt.want != nil && !errors.Is(err, tt.want) {
					t.Errorf("rooted %v: got %v, want %v", rooted, err, tt.want)
				}
			})
		}
	}
}

// TestReadPatchesFollowsSymlinksInsideTheDir: a patch that links to another
// file of the patches dir is read as that file.
func TestReadPatchesFollowsSymlinksInsideTheDir(t *testing.T) {
	s := manifestState(t, t.TempDir(), "v1.36.3")
	s.Config.PatchesDir = "/etc/kubeboot/patches"
	dir := s.Files.HostPath(s.Config.PatchesDir)
	must(t, os.MkdirAll(filepath.Join(dir, "shared"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "shared", "common.yaml"), []byte("metadata:\n  labels:\n    a: b\n"), 0o600))
	must(t, os.Symlink("shared/common.yaml", filepath.Join(dir, "kube-apiserver.yaml")))
	patches, err := readPatches(s)
	if err != nil || len(patches) != 1 || !strings.Contains(string(patches[0].Data), "a: b") {
		t.Fatalf("a symlink inside the patches dir: %v, %v", patches, err)
	}
}

// The etcd data dir check reads this node's etcd manifest: a FIFO there
// must not block preflight.
func TestCheckEtcdDataDirDoesNotBlock(t *testing.T) {
	root := t.TempDir()
	s := manifestState(t, root, "v1.36.3")
	must(t, os.MkdirAll(s.Files.HostPath(filepath.Join(s.Config.Etcd.Local.DataDir, "member")), 0o700))
	must(t, os.MkdirAll(s.Files.HostPath(s.Config.Paths.ManifestsDir), 0o755))
	must(t, syscall.Mkfifo(s.Files.HostPath(s.Config.ManifestPath(config.NameEtcd)), 0o600))
	done := make(chan error, 1)
	go func() { done <- checkEtcdDataDir(s) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not empty") {
			t.Errorf("want the data dir refused, got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("checkEtcdDataDir blocked for 5s")
	}
}
