package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/controlplane"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/phases"
)

// planOptions are the flags of `kubeboot upgrade plan`.
type planOptions struct {
	deps       deps
	configPath string
	// kubeconfig is --kubeconfig: plan from any machine, with the
	// configuration the cluster keeps, instead of a node's --config.
	kubeconfig string
	output     outputFormat
}

// newUpgradePlanCommand is `kubeboot upgrade plan [VERSION]`: what an
// upgrade of the whole cluster would change, node by node, and the order
// of its steps. It only reads the cluster, so it takes no node lock.
func newUpgradePlanCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	opts := &planOptions{deps: d}
	cmd := &cobra.Command{
		Use:   "plan [VERSION]",
		Short: "Show what an upgrade of the cluster to VERSION (default: the configuration's kubernetesVersion) changes on each node and in the addons, and the order of the steps",
		Example: examples(
			"kubeboot upgrade plan --config cluster.yaml",
			"kubeboot upgrade plan v1.36.3 --config cluster.yaml -o json",
			"kubeboot upgrade plan v1.36.3 --kubeconfig admin.conf",
		),
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return opts.run(cmd, firstArg(args), stdout, stderr)
		},
	}
	addConfigFlag(cmd.Flags(), &opts.configPath)
	addOutputFlag(cmd.Flags(), &opts.output)
	cmd.Flags().StringVar(&opts.kubeconfig, "kubeconfig", "", "an administrator's kubeconfig, to plan from any machine instead of a control-plane node: the configuration is the one the cluster keeps in kube-system/kubeboot-config (init and upgrade apply store it)")
	return cmd
}

// run plans the upgrade to target (empty: the configuration's release)
// and prints the plan. A VERSION kubeboot cannot render is refused before
// the cluster is read.
func (o *planOptions) run(cmd *cobra.Command, target string, stdout, stderr io.Writer) error {
	if target != "" {
		if _, err := config.ParseKubernetesVersion(target); err != nil {
			return &exit.UsageError{Msg: fmt.Sprintf("upgrade plan VERSION %q: %v", target, err)}
		}
	}
	report := output.NewReporter(stderr, false)
	r, client, err := o.cluster(cmd.Context(), report)
	if err != nil {
		return err
	}
	// VERSION's configuration is a copy: the loaded one stays as it is.
	next := r.config
	if target != "" {
		if next, err = r.config.AtKubernetesVersion(target); err != nil {
			return err
		}
	}
	s, err := o.deps.node(runSpec{config: next, options: r.options}, report, stdout)
	if err != nil {
		return err
	}
	plan, err := controlplane.PlanUpgrade(cmd.Context(), s.Run, client, next)
	if err != nil {
		return err
	}
	if o.output.json() {
		return json.NewEncoder(stdout).Encode(plan)
	}
	return printPlan(stdout, plan)
}

// cluster is the configuration to plan from and the client to read the
// cluster with: with --kubeconfig, the configuration the cluster keeps;
// else the node's --config and its admin.conf.
func (o *planOptions) cluster(ctx context.Context, report *output.Reporter) (runSpec, kubernetes.Interface, error) {
	if o.kubeconfig != "" {
		if err := configOrKubeconfig(o.configPath, o.kubeconfig); err != nil {
			return runSpec{}, nil, err
		}
		client, err := o.deps.kubeconfigClient(o.kubeconfig)
		if err != nil {
			return runSpec{}, nil, err
		}
		c, err := phases.SharedConfig(ctx, client, o.deps.configEnv().Host)
		return runSpec{config: c}, client, err
	}
	r, err := o.deps.nodeSpec(o.configPath, "")
	if err != nil {
		return runSpec{}, nil, err
	}
	path := r.config.KubeconfigPath(config.KubeconfigAdmin)
	kubeconfig, err := o.deps.run(r, report, nil).Files.ReadFile(path)
	if err != nil {
		return runSpec{}, nil, fmt.Errorf("read %q (upgrade plan reads the cluster with admin.conf; pass the node's --config, or --kubeconfig): %w", path, err)
	}
	client, err := o.deps.adminClient(kubeconfig)
	if err != nil {
		return runSpec{}, nil, fmt.Errorf("load %q: %w", path, err)
	}
	return r, client, nil
}

// printPlan prints the plan as a table per node, the addons and the steps.
func printPlan(w io.Writer, plan controlplane.UpgradePlan) error {
	_, _ = fmt.Fprintf(w, "Upgrade to %s (kube-system/kubeadm-config says %s)\n\n", plan.Target, plan.ClusterVersion)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "NODE\tCOMPONENT\tNOW\tAFTER")
	row := func(node string, c controlplane.Change) {
		after := c.To
		if c.To == c.From {
			after = "(stays)"
		}
		if c.Name == "kubelet" && c.From != plan.Target {
			after = plan.Target + " (yours to install)"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", node, c.Name, c.From, after)
	}
	for _, n := range plan.Nodes {
		for _, c := range n.Components {
			row(n.Name, c)
		}
	}
	for _, c := range plan.Addons {
		row("(addon)", c)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, _ = fmt.Fprintln(w, "\nSteps, in order:")
	for i, step := range plan.Steps {
		_, _ = fmt.Fprintf(w, "%d. %s\n", i+1, step)
	}
	return nil
}
