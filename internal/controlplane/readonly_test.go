package controlplane

import (
	"context"
	"testing"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/phases/phasestest"
	"github.com/kubeboot/kubeboot/templates"
)

// TestWorkflowsLeaveTheConfigurationAlone: the configuration is read-only
// once loaded. Init, a control-plane node's join, diff and reset each run
// on a node and leave it as it was; what a node learns (its etcd
// membership) is data of the run, not of the configuration. The worker's
// join is join's TestKubeletWaitBootstrap, and the live steps (etcd-join,
// upgrade apply) are checked by every command run (app's
// TestRunLeavesTheConfigurationAlone and the e2e suite).
func TestWorkflowsLeaveTheConfigurationAlone(t *testing.T) {
	ctx := context.Background()
	s := phasestest.NewNode(t, t.TempDir(), "v1.36.3")
	s.Options.Offline = true
	unchanged := phasestest.Unchanged(t, s.Config)
	_, err := phases.InitWorkflow.Run(ctx, s, nil)
	must(t, err)
	unchanged("init")

	secrets, err := phases.ClusterSecrets(s)
	must(t, err)
	joiner := phasestest.NewNode(t, t.TempDir(), "v1.36.3")
	joiner.Options.Offline = true
	joinSettings := &config.Join{EtcdEndpoints: []string{"https://10.0.0.10:2379"}}
	joinerUnchanged := phasestest.Unchanged(t, joiner.Config)
	settingsUnchanged := phasestest.Unchanged(t, joinSettings)
	cp := &JoinNode{Node: joiner, Join: joinSettings, Secrets: secrets}
	// join-preflight dials the endpoint, which this test has not, and an
	// offline run renders no etcd, which etcd-join (live) would.
	_, err = JoinWorkflow.Run(ctx, cp, []string{"join-preflight", "validate", "write-manifests"})
	must(t, err)
	joinerUnchanged("join --control-plane")
	settingsUnchanged("join --control-plane")

	// diff on a node whose etcd member joined a cluster: the membership
	// on the node is no part of the configuration.
	s.Membership = templates.EtcdMembership{InitialCluster: "node0=https://10.0.0.9:2380,node1=https://10.0.0.10:2380"}
	must(t, phasestest.Run(s, phases.Etcd, phases.WriteManifests))
	joined, err := phases.NewNode(s.Run, s.Config)
	must(t, err)
	_, err = Diff(joined)
	must(t, err)
	unchanged("diff")

	withEtcdData(t, s)
	_, err = Reset(ResetOptions{Force: true}).Execute(ctx, s)
	must(t, err)
	unchanged("reset")
}
