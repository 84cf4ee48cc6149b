package app

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/client-go/kubernetes"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/controlplane"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/worker"
	"github.com/kubeboot/kubeboot/internal/workflow"
)

// resetOptions are the flags of `kubeboot reset`.
type resetOptions struct {
	deps       deps
	configPath string
	root       string
	output     outputFormat
	dryRun     bool
	force      bool
	keepPKI    bool
	// deleteNode is --delete-node, and kubeconfig --kubeconfig, the
	// credential it deletes the worker's Node with.
	deleteNode bool
	kubeconfig string
	// nodeClient is the client of --kubeconfig, which spec builds.
	nodeClient kubernetes.Interface
}

// spec loads the node's configuration, whichever kind: a joined node and a
// worker reset too.
func (o *resetOptions) spec() (runSpec, error) {
	root, err := absRoot(o.root)
	if err != nil {
		return runSpec{}, err
	}
	doc, err := o.deps.load(o.configPath, config.KindClusterConfiguration, config.KindJoinConfiguration, config.KindWorkerConfiguration)
	if err != nil {
		return runSpec{}, err
	}
	if o.deleteNode && doc.Worker == nil {
		return runSpec{}, &exit.UsageError{Msg: "--delete-node resets a worker (--config of its WorkerConfiguration); remove a control-plane node's Node with kubectl once its reset is done"}
	}
	if o.deleteNode && o.kubeconfig != "" {
		if o.nodeClient, err = o.deps.kubeconfigClient(o.kubeconfig); err != nil {
			return runSpec{}, err
		}
	}
	return runSpec{config: doc.ControlPlane(), worker: doc.Worker, root: root, dryRun: o.dryRun,
		options: workflow.Options{Offline: root != "", DryRun: o.dryRun}}, nil
}

// steps reset the node r configures: a control-plane node (controlplane.Reset) or
// a worker (worker.Reset).
func (o *resetOptions) steps(reset controlplane.ResetOptions) steps {
	return func(ctx context.Context, r runSpec, run *workflow.Run) ([]string, resultOf, error) {
		if r.worker != nil {
			if o.nodeClient != nil {
				run.API = o.nodeClient
			}
			return onWorker(worker.Reset(o.deleteNode).Execute)(ctx, r, run)
		}
		return onNode(controlplane.Reset(reset).Execute)(ctx, r, run)
	}
}

// newResetCommand is `kubeboot reset`: it undoes init's or join's files on
// this node. Static pods are the kubelet's business; a worker's kubelet
// stops through systemd (in the lab, `lab down` stops it).
func newResetCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	opts := &resetOptions{deps: d}
	cmd := &cobra.Command{
		Use:   "reset",
		Short: "Undo init or join on this node: on a control-plane node remove the manifests, wait for the components to stop, then remove the kubeconfigs, PKI, etcd data and kubeboot's own files; on a worker (--config of its WorkerConfiguration) stop kubelet.service and remove the join's files and the kubelet's certificates",
		Example: examples(
			"kubeboot reset --config cluster.yaml",
			"kubeboot reset --force --config join.yaml",
			"kubeboot reset --config worker.yaml --delete-node --kubeconfig admin.conf",
		),
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			reset := controlplane.ResetOptions{Force: opts.force, KeepPKI: opts.keepPKI}
			// Only a human at a terminal is asked; a script gets a refusal.
			if f, ok := cmd.InOrStdin().(*os.File); ok && term.IsTerminal(int(f.Fd())) {
				reset.Confirm = func(q string) bool { return confirm(f, stderr, q) }
			}
			return d.execute(cmd.Context(), opts.output, stdout, stderr, opts.spec, opts.steps(reset))
		},
	}
	flags := cmd.Flags()
	addConfigFlag(flags, &opts.configPath)
	addDryRunFlag(flags, &opts.dryRun)
	addRootFlag(flags, &opts.root)
	addOutputFlag(flags, &opts.output)
	flags.BoolVar(&opts.force, "force", false, "remove the etcd data dir without asking, and leave the etcd cluster even when the remaining members would lose their quorum")
	flags.BoolVar(&opts.keepPKI, "keep-pki", false, "keep the certificates, keys and encryption configuration")
	flags.BoolVar(&opts.deleteNode, "delete-node", false, "on a worker, also delete its Node object, through --kubeconfig")
	flags.StringVar(&opts.kubeconfig, "kubeconfig", "", "with --delete-node: a kubeconfig allowed to delete Nodes, such as a control-plane node's admin.conf")
	return cmd
}

// confirm asks a yes/no question on the terminal; anything but yes is no.
func confirm(in io.Reader, out io.Writer, question string) bool {
	_, _ = fmt.Fprintf(out, "%s [y/N] ", question)
	answer, _ := bufio.NewReader(in).ReadString('\n')
	answer = strings.ToLower(strings.TrimSpace(answer))
	return answer == "y" || answer == "yes"
}
