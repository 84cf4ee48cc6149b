package controlplane

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeboot/kubeboot/internal/config"
)

// TestSnapshotPodFollowsTheConfiguration: upgrade apply writes the
// snapshot pod's manifest once etcd.local.scheduledSnapshots is set and
// removes it once it is not, and reset removes it with the rest.
func TestSnapshotPodFollowsTheConfiguration(t *testing.T) {
	s := initialised(t)
	schedule := &config.ScheduledSnapshots{Interval: metav1.Duration{Duration: time.Hour}, Keep: 2, Image: "kubeboot.io/kubeboot:dev"}
	path := s.Config.ManifestPath(config.NameEtcdSnapshots)

	s.Config.Etcd.Local.ScheduledSnapshots = schedule
	_, data, err := wantedPods(s, nil)
	must(t, err)
	if _, ok := data[config.NameEtcdSnapshots]; !ok {
		t.Fatal("no snapshot pod rendered with scheduledSnapshots set")
	}
	if wrote, err := upgradeKubebootPods(s, nodeManifests(t, s), data); err != nil || !wrote {
		t.Fatalf("turned on: wrote %v, %v", wrote, err)
	}
	if got, err := s.Files.ReadFile(path); err != nil || string(got) != string(data[config.NameEtcdSnapshots]) {
		t.Fatalf("manifest after turning it on: %v\n%s", err, got)
	}

	s.Config.Etcd.Local.ScheduledSnapshots = nil
	_, data, err = wantedPods(s, nil)
	must(t, err)
	if wrote, err := upgradeKubebootPods(s, nodeManifests(t, s), data); err != nil || !wrote {
		t.Errorf("turned off: wrote %v, %v", wrote, err)
	}
	if _, err := os.Stat(s.Files.HostPath(path)); !os.IsNotExist(err) {
		t.Errorf("the snapshot pod's manifest is still there: %v", err)
	}

	s.Config.Etcd.Local.ScheduledSnapshots = schedule
	_, data, err = wantedPods(s, nil)
	must(t, err)
	if _, err := upgradeKubebootPods(s, nodeManifests(t, s), data); err != nil {
		t.Fatal(err)
	}
	if _, err := resetNode(context.Background(), s, ResetOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if left := regularFiles(t, s); len(left) > 0 {
		t.Errorf("reset left %v", left)
	}
}

// TestResetKeepsTheSnapshots: reset removes the etcd data dir but keeps
// the snapshots in etcd.local.snapshotsDir, the cluster's backups, and
// says so.
func TestResetKeepsTheSnapshots(t *testing.T) {
	s := initialised(t)
	dir := s.Config.Etcd.Local.SnapshotsDir
	must(t, s.Files.MkdirAll(dir, 0o700))
	snapshot := filepath.Join(dir, "etcd-snapshot-20261126T120000.000Z.db")
	must(t, s.Files.WriteFile(snapshot, []byte("a snapshot"), 0o600))
	res, err := resetNode(context.Background(), s, ResetOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Files.HostPath(snapshot)); err != nil {
		t.Errorf("reset removed the snapshot: %v", err)
	}
	if !slices.ContainsFunc(res.Left, func(l string) bool { return strings.HasPrefix(l, "the etcd snapshots in "+dir+" (1): kept") }) {
		t.Errorf("reset did not say it kept the snapshot: %q", res.Left)
	}
}
