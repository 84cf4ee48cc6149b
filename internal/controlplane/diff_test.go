package controlplane

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/health"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
	"github.com/kubeboot/kubeboot/templates"
)

// initialised is a node under a temp root on which every file-writing
// phase of init has run.
func initialised(t *testing.T) *phases.Node {
	t.Helper()
	return initialisedWith(t, func(*config.ClusterConfiguration) {})
}

// renderNode is init's phases that write a node's files, offline.
var renderNode = workflow.Runner[*phases.Node]{Phases: []workflow.Phase[*phases.Node]{phases.Certs, phases.Kubeconfig, phases.KubeletConfig, phases.APIServerConfig, phases.Etcd, phases.ControlPlane, phases.Validate, phases.WriteManifests}}

// initialisedWith is initialised with edit applied to the configuration
// first.
func initialisedWith(t *testing.T, edit func(*config.ClusterConfiguration)) *phases.Node {
	t.Helper()
	s := phasestest.NewNode(t, t.TempDir(), "v1.36.3")
	edit(s.Config)
	s.Options.Offline = true
	if _, err := renderNode.Run(context.Background(), s, nil); err != nil {
		t.Fatal(err)
	}
	return s
}

// changes summarises differences as "change kind path" lines.
func changes(diffs []Difference) []string {
	var out []string
	for _, d := range diffs {
		out = append(out, d.Change+" "+d.Kind+" "+d.Path)
	}
	return out
}

func TestDiffInitialisedNodeHasNoChange(t *testing.T) {
	s := initialised(t)
	diffs, err := Diff(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 0 {
		t.Errorf("a freshly initialised node differs:\n%s", strings.Join(changes(diffs), "\n"))
	}
}

// TestDiffFinalizedNode: a kubelet.conf that names the certificate the
// kubelet rotates, as kubelet-finalize leaves it, is no change.
func TestDiffFinalizedNode(t *testing.T) {
	s := initialised(t)
	phasestest.KubeletPair(t, s, phasestest.ClusterCA(t, s), s.Config.Node.Name)
	s.Options.Offline = false // kubelet-finalize runs on a live node
	if err := phasestest.Run(s, phases.KubeletFinalize); err != nil {
		t.Fatal(err)
	}
	if files := s.Files.Changes().Written; !slices.Contains(files, s.Config.KubeconfigPath(config.KubeconfigKubelet)) {
		t.Fatalf("kubelet-finalize wrote %v", files)
	}
	diffs, err := Diff(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 0 {
		t.Errorf("a finalized node differs:\n%s", strings.Join(changes(diffs), "\n"))
	}
}

// A node whose etcd joined a cluster was rendered with a membership its
// configuration does not hold; diff reads it from the node (as every
// command does, through phases.NewNode), so the node has no change, while
// a change to another etcd flag still shows.
func TestDiffJoinedNode(t *testing.T) {
	written := initialised(t)
	cluster := "node1=https://10.0.0.1:2380," + written.Config.Node.Name + "=https://10.0.0.5:2380"
	written.Membership = templates.EtcdMembership{InitialCluster: cluster}
	if err := phasestest.Run(written, phases.Etcd, phases.WriteManifests); err != nil {
		t.Fatal(err)
	}

	s, err := phases.NewNode(written.Run, written.Config)
	if err != nil {
		t.Fatal(err)
	}
	diffs, err := Diff(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 0 {
		t.Errorf("a joined node differs:\n%s", strings.Join(changes(diffs), "\n"))
	}
	if got := health.CommandFlags(mustDecode(t, s, config.NameEtcd), config.NameEtcd)["initial-cluster"]; got != cluster {
		t.Fatalf("the etcd manifest on disk has --initial-cluster=%s", got)
	}

	s.Config.Etcd.Local.ExtraArgs = []config.Arg{{Name: "snapshot-count", Value: "10001"}}
	diffs, err = Diff(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 1 || !strings.Contains(diffs[0].Diff, "+    - --snapshot-count=10001") || strings.Contains(diffs[0].Diff, "initial-cluster") {
		t.Errorf("an etcd change on a joined node: %+v", diffs)
	}
}

// mustDecode decodes a component's manifest on disk.
func mustDecode(t *testing.T, s *phases.Node, component string) *corev1.Pod {
	t.Helper()
	path := s.Config.ManifestPath(component)
	data, err := s.Files.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := phases.DecodePod(path, data)
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

func TestDiffShowsManifestEdit(t *testing.T) {
	s := initialised(t)
	path := s.Config.ManifestPath(config.NameScheduler)
	host := s.Files.HostPath(path)
	data, err := os.ReadFile(host)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(data), "--leader-elect=true", "--leader-elect=false", 1)
	if edited == string(data) {
		t.Fatal("the scheduler manifest has no --leader-elect=true to edit")
	}
	if err := os.WriteFile(host, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	diffs, err := Diff(s)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"update manifest " + path}, changes(diffs)); diff != "" {
		t.Fatalf("differences (-want +got):\n%s", diff)
	}
	if !strings.Contains(diffs[0].Diff, "-    - --leader-elect=false") || !strings.Contains(diffs[0].Diff, "+    - --leader-elect=true") {
		t.Errorf("diff does not show the edit:\n%s", diffs[0].Diff)
	}
}

func TestDiffPKI(t *testing.T) {
	s := initialised(t)
	c := s.Config
	// A removed certificate is created again; a new SAN renews the API
	// server's certificate. Neither may show any PEM.
	if err := os.Remove(s.Files.HostPath(c.CertPath(config.CertFrontProxyClient))); err != nil {
		t.Fatal(err)
	}
	c.APIServer.CertSANs = append(c.APIServer.CertSANs, "10.9.9.9")
	diffs, err := Diff(s)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"create pki " + c.CertPath(config.CertFrontProxyClient),
		"renew pki " + c.CertPath(config.CertAPIServer),
	}
	if diff := cmp.Diff(want, changes(diffs)); diff != "" {
		t.Errorf("differences (-want +got):\n%s", diff)
	}
	for _, d := range diffs {
		if d.Diff != "" {
			t.Errorf("%s: a PKI difference shows content", d.Path)
		}
		if d.Change == ChangeRenew && !strings.Contains(d.Reason, "10.9.9.9") {
			t.Errorf("%s: reason %q does not name the missing SAN", d.Path, d.Reason)
		}
	}
}

// TestDiffReportsChangedKeyAlgorithm: a new certificates.keyAlgorithm is
// not applied to existing keys by init, so diff names each certificate and
// kubeconfig whose key is of the other algorithm.
func TestDiffReportsChangedKeyAlgorithm(t *testing.T) {
	s := initialised(t)
	s.Config.Certificates.KeyAlgorithm = config.RSA2048
	diffs, err := Diff(s)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]Difference{}
	for _, d := range diffs {
		byPath[d.Path] = d
	}
	want := Difference{Path: s.Config.CertPath(config.CertAPIServer), Kind: KindPKI, Change: ChangeRenew,
		Reason: "key is ecdsa-p256, certificates.keyAlgorithm is rsa-2048: init keeps existing keys; `kubeboot certs renew --new-keys` replaces them"}
	if diff := cmp.Diff(want, byPath[want.Path]); diff != "" {
		t.Errorf("apiserver.crt (-want +got):\n%s", diff)
	}
	if d := byPath[s.Config.KubeconfigPath(config.KubeconfigAdmin)]; d.Change != ChangeRenew || !strings.Contains(d.Reason, "key is ecdsa-p256") {
		t.Errorf("admin.conf: %+v", d)
	}
	if d, ok := byPath[s.Config.CertPath(config.CertCA)]; ok {
		t.Errorf("a CA is never re-keyed, yet diff lists it: %+v", d)
	}
}
