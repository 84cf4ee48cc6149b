package phases_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
	"github.com/kubeboot/kubeboot/templates"
)

// TestNewNodeReadsTheEtcdMembership: a node's etcd membership is read from
// the etcd manifest on it: a joined member's cluster, none for a founding
// member or no manifest, and, with a warning, none for a manifest that
// does not decode, so that reset and restore still run on a broken node.
func TestNewNodeReadsTheEtcdMembership(t *testing.T) {
	root := t.TempDir()
	written := phasestest.NewNode(t, root, config.DefaultKubernetesVersion)
	written.Options.Offline = true
	var out bytes.Buffer
	read := func() templates.EtcdMembership {
		t.Helper()
		out.Reset()
		n, err := phases.NewNode(phasestest.NewRun(root, output.NewReporter(&out, false)), written.Config)
		if err != nil {
			t.Fatal(err)
		}
		return n.Membership
	}
	if m := read(); m != (templates.EtcdMembership{}) {
		t.Errorf("no manifest: membership %+v", m)
	}
	if err := phasestest.Run(written, phases.Certs, phases.Etcd, phases.ControlPlane, phases.Validate, phases.WriteManifests); err != nil {
		t.Fatal(err)
	}
	if m := read(); m != (templates.EtcdMembership{}) {
		t.Errorf("a founding member: membership %+v", m)
	}
	joined := templates.EtcdMembership{InitialCluster: "node0=https://10.0.0.9:2380,node1=https://10.0.0.10:2380"}
	written.Membership = joined
	if err := phasestest.Run(written, phases.Etcd, phases.WriteManifests); err != nil {
		t.Fatal(err)
	}
	if m := read(); m != joined {
		t.Errorf("a joined member: membership %+v, want %+v", m, joined)
	}
	path := filepath.Join(root, written.Config.ManifestPath(config.NameEtcd))
	if err := os.WriteFile(path, []byte("kind: [not a pod"), 0o600); err != nil {
		t.Fatal(err)
	}
	if m := read(); m != (templates.EtcdMembership{}) || !strings.Contains(out.String(), "taken for one that founded its cluster") {
		t.Errorf("a broken manifest: membership %+v, output %q", m, out.String())
	}
}
