package app

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/bootstrap"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/controlplane"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/nodepod"
	"github.com/kubeboot/kubeboot/internal/rotateca"
	"github.com/kubeboot/kubeboot/internal/worker"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/pki"
	"github.com/kubeboot/kubeboot/templates"
)

// rotateCAOptions are the flags of `kubeboot certs rotate-ca`.
type rotateCAOptions struct {
	*certsOptions
	kubeconfig     string
	output         outputFormat
	nodeConfig     string
	nodeKubeboot   string
	nodeTimeout    time.Duration
	rolloutTimeout time.Duration
}

// newRotateCACommand is `kubeboot certs rotate-ca`: the cluster's CAs and
// service-account key replaced on every node, through the cluster
// (package rotateca), with its hidden parts: on-node, what each node's
// pod runs, and step, a node's own step.
func newRotateCACommand(shared *certsOptions, stdout, stderr io.Writer) *cobra.Command {
	opts := &rotateCAOptions{certsOptions: shared}
	cmd := &cobra.Command{
		Use:   "rotate-ca",
		Short: "Replace the cluster CA, the etcd CA, the front-proxy CA and the service-account key on every node, from any machine: trust the new beside the old, reissue and sign with the new, restart the workloads, drop the old; a second run takes up where one stopped",
		Example: examples(
			"kubeboot certs rotate-ca --kubeconfig admin.conf",
			"kubeboot certs rotate-ca --kubeconfig admin.conf -o json",
		),
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return opts.run(cmd.Context(), stdout, stderr)
		},
	}
	flags := cmd.Flags()
	addOutputFlag(flags, &opts.output)
	flags.StringVar(&opts.kubeconfig, "kubeconfig", "/etc/kubernetes/admin.conf", "an administrator's kubeconfig with a client certificate (admin.conf's); the rotation rewrites it in place to trust the new CA and hold a certificate it signed")
	flags.StringVar(&opts.nodeConfig, "node-config", bootstrap.ConfigPath, "the node's file on every node, as kubeboot's bootstrap unit reads it")
	flags.StringVar(&opts.nodeKubeboot, "node-kubeboot", "/usr/bin/kubeboot", "kubeboot's binary on every node, as its package installs it")
	flags.DurationVar(&opts.nodeTimeout, "node-timeout", 15*time.Minute, "how long a node's step may take")
	flags.DurationVar(&opts.rolloutTimeout, "rollout-timeout", 10*time.Minute, "how long the restart of the workloads may take")
	cmd.AddCommand(newRotateCAOnNodeCommand(stdout), newRotateCAStepCommand(shared, stdout, stderr))
	return cmd
}

// run rotates the CAs of the cluster the kubeconfig reaches.
func (o *rotateCAOptions) run(ctx context.Context, stdout, stderr io.Writer) error {
	if o.configPath != "" {
		return &exit.UsageError{Msg: "certs rotate-ca takes --kubeconfig, not --config: it acts on the cluster, from any machine"}
	}
	if o.nodeTimeout <= 0 || o.rolloutTimeout <= 0 {
		return &exit.UsageError{Msg: "--node-timeout and --rollout-timeout: want positive durations, like 15m"}
	}
	report := reporter(o.output, stdout, stderr)
	client, err := o.deps.kubeconfigClient(o.kubeconfig)
	if err != nil {
		return err
	}
	shared, err := phases.SharedConfig(ctx, client, o.deps.configEnv().Host)
	if err != nil {
		return err
	}
	if shared.Certificates.CA != nil && shared.Certificates.CA.Key == "" {
		return &exit.UsageError{Msg: "certificates.ca has no key: the cluster's CA is external, and kubeboot cannot make or distribute its successor; rotate it with the tooling that owns it"}
	}
	nodes, err := rotateca.ClusterNodes(ctx, client)
	if err != nil {
		return err
	}
	opts := rotateca.Options{Config: shared, Nodes: nodes, NodeConfig: o.nodeConfig, Image: shared.CSRApprover.Image,
		Kubeboot:    templates.Kubeboot{Binary: o.nodeKubeboot, Version: o.deps.version.Version},
		NodeTimeout: o.nodeTimeout, RolloutTimeout: o.rolloutTimeout}
	r, err := rotateca.New(rotateca.Admin{Kubeconfig: o.kubeconfig, Client: o.deps.kubeconfigClient}, opts, report)
	if err != nil {
		return err
	}
	res, err := r.Run(ctx)
	if o.output.json() {
		report.PrintResult(struct {
			rotateca.Result
			failure
		}{res, failureOf(err)})
	}
	return err
}

// rotateCAOnNodeOptions are the flags of `certs rotate-ca on-node`.
type rotateCAOnNodeOptions struct {
	root, files, step string
	node              rotateca.OnNode
}

// newRotateCAOnNodeCommand is `kubeboot certs rotate-ca on-node`, hidden:
// what the rotation's pod runs on each node (rotateca.OnNode).
func newRotateCAOnNodeCommand(stdout io.Writer) *cobra.Command {
	opts := &rotateCAOnNodeOptions{}
	cmd := &cobra.Command{
		Use:    "on-node",
		Short:  "Run in certs rotate-ca's pod on a node: the node's step, as a transient systemd unit",
		Hidden: true,
		Args:   usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			step, err := rotationStep(opts.step)
			if err != nil {
				return err
			}
			opts.node.Step = step
			if opts.node.Files, err = rotateca.ReadFiles(opts.files); err != nil {
				return err
			}
			host, err := nodepod.Enter(opts.root)
			if err != nil {
				return err
			}
			return opts.node.Run(cmd.Context(), host, stdout)
		},
	}
	flags := cmd.Flags()
	flags.StringVar(&opts.root, "host-root", templates.UpgradeHostRoot, "where the node's root is mounted")
	flags.StringVar(&opts.files, "files", templates.RotateCAMaterialMount, "where the rotation's Secret is mounted")
	flags.StringVar(&opts.step, "step", "", "the node's step: one of trust, reissue, kubelet, drop")
	flags.StringVar(&opts.node.Config, "node-config", bootstrap.ConfigPath, "the node's file")
	flags.BoolVar(&opts.node.ControlPlane, "control-plane", false, "the node runs the control plane")
	return cmd
}

// rotationStep parses a node's step.
func rotationStep(s string) (pki.RotationStep, error) {
	if !slices.Contains(pki.RotationSteps, pki.RotationStep(s)) {
		return "", &exit.UsageError{Msg: fmt.Sprintf("--step %q: want one of %v", s, pki.RotationSteps)}
	}
	return pki.RotationStep(s), nil
}

// rotateCAStepOptions are the flags of `certs rotate-ca step`.
type rotateCAStepOptions struct {
	*certsOptions
	files   string
	output  outputFormat
	timeout time.Duration
}

// spec loads the node's configuration, whichever kind; without --config,
// the node is a worker `kubeadm join` joined, on kubeadm's paths.
func (o *rotateCAStepOptions) spec() (runSpec, error) {
	if o.configPath == "" {
		w := &config.WorkerConfiguration{}
		config.SetWorkerDefaults(w, o.deps.configEnv().Host)
		return runSpec{worker: w, options: workflow.Options{}}, nil
	}
	doc, err := o.deps.load(o.configPath, config.KindJoinConfiguration, config.KindClusterConfiguration, config.KindWorkerConfiguration)
	if err != nil {
		return runSpec{}, err
	}
	return runSpec{config: doc.ControlPlane(), worker: doc.Worker, options: workflow.Options{}}, nil
}

// newRotateCAStepCommand is `kubeboot certs rotate-ca step STEP`, hidden:
// one node's step of a rotation, with the rotation's files, which the
// rotation's pod runs as a unit and an administrator may run by hand.
func newRotateCAStepCommand(shared *certsOptions, stdout, stderr io.Writer) *cobra.Command {
	opts := &rotateCAStepOptions{certsOptions: shared}
	cmd := &cobra.Command{
		Use:    "step trust|reissue|kubelet|drop",
		Short:  "One node's step of certs rotate-ca, with the rotation's files (--files)",
		Hidden: true,
		Args:   usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			step, err := rotationStep(args[0])
			if err != nil {
				return err
			}
			files, err := rotateca.ReadFiles(opts.files)
			if err != nil {
				return &exit.UsageError{Msg: "--files: " + err.Error()}
			}
			steps := func(ctx context.Context, r runSpec, run *workflow.Run) ([]string, resultOf, error) {
				if r.worker != nil {
					return onWorker(worker.RotateCA(step, files, opts.timeout).Execute)(ctx, r, run)
				}
				return onNode(controlplane.RotateCA(step, files, opts.timeout, opts.configPath).Execute)(ctx, r, run)
			}
			return opts.deps.execute(cmd.Context(), opts.output, stdout, stderr, opts.spec, steps)
		},
	}
	cmd.Flags().StringVar(&opts.files, "files", "", "the directory of the rotation's files (the kube-system/kubeboot-rotate-ca Secret's)")
	cmd.Flags().DurationVar(&opts.timeout, "timeout", 5*time.Minute, "how long the kubelet's certificate and its restart may take")
	addOutputFlag(cmd.Flags(), &opts.output)
	return cmd
}
