package app

import (
	"context"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/netpol"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/templates"
)

// The network-policy controller's pace: a change is applied once the
// changes that come with it have arrived, and the table is taken back
// every minute from whoever changed it.
const (
	networkPolicySettle = 100 * time.Millisecond
	networkPolicyResync = time.Minute
)

func newNetworkPolicyCommand(stderr io.Writer) *cobra.Command {
	var node string
	cmd := &cobra.Command{
		Use:     templates.NetworkPolicyCommand,
		Short:   "Enforce the cluster's NetworkPolicy on this node (the kubeboot-network-policy DaemonSet runs this)",
		Example: examples("kubeboot network-policy --node-name w1"),
		Long: "Watches the cluster's pods, namespaces and NetworkPolicies, with the pod's service account, and keeps the\n" +
			"node's nftables table inet " + netpol.TableName + " to what they allow: a new connection to or from a pod\n" +
			"of this node that a policy isolates passes only if a policy allows it; replies pass. The table is replaced\n" +
			"whole, at once, after every change. Runs until SIGINT or SIGTERM, and leaves the table as it is: the node\n" +
			"keeps enforcing while its pod restarts.",
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if node == "" {
				return &exit.UsageError{Msg: "--node-name is required: the node whose pods to enforce for (the DaemonSet passes spec.nodeName)"}
			}
			report := output.NewReporter(stderr, false)
			report.SetPhase(templates.NetworkPolicyCommand)
			return runNetworkPolicy(cmd.Context(), node, report)
		},
	}
	cmd.Flags().StringVar(&node, "node-name", "", "this node's name")
	return cmd
}

// runNetworkPolicy runs node's enforcer in its pod, logging through
// report.
func runNetworkPolicy(ctx context.Context, node string, report *output.Reporter) error {
	report.Infof("enforcing NetworkPolicy for the pods of node %s in table inet %s", node, netpol.TableName)
	return netpol.RunInPod(ctx, node, templates.NetworkPolicyName, netpol.Options{
		Settle: networkPolicySettle, Resync: networkPolicyResync,
		Log: func(line string) { report.Infof("%s", line) },
	})
}
