package app

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kubeboot/kubeboot/internal/bootstrap"
	"github.com/kubeboot/kubeboot/internal/clusterupgrade"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/controlplane"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/nodepod"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/templates"
)

// clusterUpgradeOptions are the flags of `kubeboot upgrade cluster`.
type clusterUpgradeOptions struct {
	deps           deps
	kubeconfig     string
	output         outputFormat
	nodeConfig     string
	nodeKubeboot   string
	maxUnavailable int
	drainTimeout   time.Duration
	nodeTimeout    time.Duration
	kubeadmIgnore  string
}

// newUpgradeClusterCommand is `kubeboot upgrade cluster VERSION`: every
// node, one command, through the cluster (package clusterupgrade).
func newUpgradeClusterCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	opts := &clusterUpgradeOptions{deps: d}
	cmd := &cobra.Command{
		Use:   "cluster VERSION",
		Short: "Upgrade every node to VERSION from any machine: the control-plane nodes one at a time, then the workers, each drained, upgraded on the node by a pod that runs its kubeboot, seen Ready and uncordoned; a second run takes up where one stopped",
		Example: examples(
			"kubeboot upgrade cluster v1.36.3 --kubeconfig admin.conf",
			"kubeboot upgrade cluster v1.36.3 --kubeconfig admin.conf --max-unavailable 2 -o json",
		),
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return opts.run(cmd, args[0], stdout, stderr)
		},
	}
	flags := cmd.Flags()
	addOutputFlag(flags, &opts.output)
	flags.StringVar(&opts.kubeconfig, "kubeconfig", "/etc/kubernetes/admin.conf", "an administrator's kubeconfig; the configuration is the one the cluster keeps in kube-system/kubeboot-config")
	flags.StringVar(&opts.nodeConfig, "node-config", bootstrap.ConfigPath, "the node's file on every node, as kubeboot's bootstrap unit reads it")
	flags.StringVar(&opts.nodeKubeboot, "node-kubeboot", "/usr/bin/kubeboot", "kubeboot's binary on every node, as its package installs it")
	flags.IntVar(&opts.maxUnavailable, "max-unavailable", 1, "how many workers are drained and upgraded at once")
	flags.DurationVar(&opts.drainTimeout, "drain-timeout", 5*time.Minute, "how long a node's drain may take; a PodDisruptionBudget that blocks it longer stops the upgrade, naming the pod")
	flags.DurationVar(&opts.nodeTimeout, "node-timeout", 15*time.Minute, "how long a node's upgrade may take, and again its wait to be Ready at VERSION")
	addKubeadmIgnoreFlag(flags, &opts.kubeadmIgnore)
	return cmd
}

// run plans the upgrade as `upgrade plan --kubeconfig` does, refusing
// what it refuses, then upgrades the nodes in the plan's order.
func (o *clusterUpgradeOptions) run(cmd *cobra.Command, version string, stdout, stderr io.Writer) error {
	if _, err := config.ParseKubernetesVersion(version); err != nil {
		return &exit.UsageError{Msg: fmt.Sprintf("upgrade cluster VERSION %q: %v", version, err)}
	}
	if o.maxUnavailable < 1 {
		return &exit.UsageError{Msg: fmt.Sprintf("--max-unavailable %d: want 1 or more", o.maxUnavailable)}
	}
	if o.drainTimeout <= 0 || o.nodeTimeout <= 0 {
		return &exit.UsageError{Msg: "--drain-timeout and --node-timeout: want positive durations, like 5m"}
	}
	ctx := cmd.Context()
	report := reporter(o.output, stdout, stderr)
	client, err := o.deps.kubeconfigClient(o.kubeconfig)
	if err != nil {
		return err
	}
	shared, err := phases.SharedConfig(ctx, client, o.deps.configEnv().Host)
	if err != nil {
		return err
	}
	next, err := shared.AtKubernetesVersion(version)
	if err != nil {
		return err
	}
	s, err := o.deps.node(runSpec{config: next, options: workflow.Options{}}, report, stdout)
	if err != nil {
		return err
	}
	plan, err := controlplane.PlanUpgrade(ctx, s.Run, client, next)
	if err != nil {
		return err
	}
	opts := clusterupgrade.Options{
		Version: next.KubernetesVersion, NodeConfig: o.nodeConfig, Install: next.Kubelet.InstallCommand,
		Image: next.CSRApprover.Image, Kubeboot: templates.Kubeboot{Binary: o.nodeKubeboot, Version: s.System.Kubeboot.Version},
		MaxUnavailable: o.maxUnavailable, DrainTimeout: o.drainTimeout, NodeTimeout: o.nodeTimeout,
		KubeadmIgnorePreflightErrors: o.kubeadmIgnore,
	}
	var names []string
	for _, n := range plan.Nodes {
		opts.Nodes = append(opts.Nodes, clusterupgrade.Node{Name: n.Name, ControlPlane: n.ControlPlane, Current: current(n, opts.Version)})
		names = append(names, n.Name)
	}
	report.Infof("upgrading to %s, in this order: %s", opts.Version, strings.Join(names, ", "))
	res, err := clusterupgrade.New(client, opts, report).Run(ctx)
	if o.output.json() {
		report.PrintResult(struct {
			clusterupgrade.Result
			failure
		}{res, failureOf(err)})
	}
	return err
}

// current says whether the plan leaves node as it is: its kubelet at
// version and each static pod's image as the release renders it.
func current(node controlplane.NodePlan, version string) bool {
	for _, c := range node.Components {
		if (c.Name == "kubelet" && c.From != version) || c.From != c.To {
			return false
		}
	}
	return true
}

// addKubeadmIgnoreFlag adds --kubeadm-ignore-preflight-errors.
func addKubeadmIgnoreFlag(flags *pflag.FlagSet, value *string) {
	flags.StringVar(value, "kubeadm-ignore-preflight-errors", "", "on a worker `kubeadm join` joined: the checks `kubeadm upgrade node` ignores (its --ignore-preflight-errors), like SystemVerification on a cgroup v1 host")
}

// onNodeOptions are the flags of `kubeboot upgrade on-node`, which the
// upgrade pod of `upgrade cluster` runs.
type onNodeOptions struct {
	root string
	node clusterupgrade.OnNode
}

// newUpgradeOnNodeCommand is `kubeboot upgrade on-node`, hidden: what
// the upgrade pod runs on each node (clusterupgrade.OnNode), with the
// kubelet's install command after --.
func newUpgradeOnNodeCommand(stdout io.Writer) *cobra.Command {
	opts := &onNodeOptions{}
	cmd := &cobra.Command{
		Use:    "on-node [-- INSTALL-COMMAND...]",
		Short:  "Run in upgrade cluster's pod on a node: install the kubelet, then upgrade the node, each as a transient systemd unit",
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.node.Install = args
			host, err := nodepod.Enter(opts.root)
			if err != nil {
				return err
			}
			return opts.node.Run(cmd.Context(), host, stdout)
		},
	}
	flags := cmd.Flags()
	flags.StringVar(&opts.root, "host-root", templates.UpgradeHostRoot, "where the node's root is mounted")
	flags.StringVar(&opts.node.Config, "node-config", bootstrap.ConfigPath, "the node's file on every node, as kubeboot's bootstrap unit reads it")
	flags.StringVar(&opts.node.Version, "kubernetes-version", "", "the release the node moves to")
	flags.BoolVar(&opts.node.Apply, "apply", false, "run upgrade apply: the first control-plane node")
	flags.BoolVar(&opts.node.ControlPlane, "control-plane", false, "the node runs the control plane: move its file to the release")
	addKubeadmIgnoreFlag(flags, &opts.node.KubeadmIgnorePreflightErrors)
	return cmd
}
