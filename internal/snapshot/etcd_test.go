package snapshot

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/etcd"
	"github.com/kubeboot/kubeboot/internal/etcd/etcdtest"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
)

// newNode is node-1 (127.0.0.1) writing under root, its progress in log,
// with c's settings beside the defaults (nil for none).
func newNode(t *testing.T, root string, log *bytes.Buffer, c *config.ClusterConfiguration) *phases.Node {
	t.Helper()
	if c == nil {
		c = config.New()
	}
	config.SetDefaults(c, config.Host{Name: "node-1", Address: "127.0.0.1"})
	if errs := config.Validate(c); len(errs) > 0 {
		t.Fatal(errs.ToAggregate())
	}
	n, err := phases.NewNode(phasestest.NewRun(root, output.NewReporter(log, false)), c)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// etcdNode is node-1 on a throw-away root with kubeboot's PKI and a real
// etcd member serving it, holding 20 keys written and one of them
// deleted: the node, its progress, the member's client URL, and the
// revision of the last change.
func etcdNode(t *testing.T) (n *phases.Node, log *bytes.Buffer, endpoint string, rev int64) {
	t.Helper()
	etcdtest.Binary(t)
	log = &bytes.Buffer{}
	n = newNode(t, t.TempDir(), log, nil)
	if err := phasestest.Run(n, phases.Certs); err != nil {
		t.Fatal(err)
	}
	pki := n.Files.HostPath(filepath.Join(n.Config.Certificates.Dir, "etcd"))
	client := etcdtest.Start(t, pki)
	return n, log, client, etcdtest.PutKeys(t, client, etcd.LocalTLS(n.Config, n.Files.HostPath), 20)
}
