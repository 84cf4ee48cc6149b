package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/internal/bootstrap"
	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/controlplane"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/nodefile"
	"github.com/kubeboot/kubeboot/internal/output"
	"github.com/kubeboot/kubeboot/internal/worker"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
)

// bootstrapOptions are the flags of `kubeboot bootstrap`.
type bootstrapOptions struct {
	deps       deps
	configPath string
	output     outputFormat
	preflight  preflightFlags
	retry      time.Duration
	// source is where the node's file comes from when configPath holds
	// none: --config-url and --config-ca-hash, or else the kernel
	// command line's, read from kernelCmdline.
	source        nodefile.Source
	kernelCmdline string
}

// spec loads the node's configuration and returns its run and the
// workflow its kind calls for: init for a ClusterConfiguration, a
// control-plane node's join for a JoinConfiguration (its cluster secrets
// from the kubeadm-certs Secret, with join.certificateKey), a worker's join
// for a WorkerConfiguration.
func (o *bootstrapOptions) spec() (runSpec, steps, error) {
	if o.configPath == "" {
		return runSpec{}, nil, &exit.UsageError{Msg: "bootstrap needs --config: the node's ClusterConfiguration, JoinConfiguration or WorkerConfiguration (the unit reads " + bootstrap.ConfigPath + ")"}
	}
	env := o.deps.configEnv(config.KindClusterConfiguration, config.KindJoinConfiguration, config.KindWorkerConfiguration)
	env.Worker = &config.WorkerFlags{}
	doc, err := config.Load(o.configPath, env)
	if err != nil {
		return runSpec{}, nil, err
	}
	options := workflow.Options{Strict: o.preflight.strict, IgnorePreflightErrors: o.preflight.ignored(), ConfigFile: absConfig(o.configPath)}
	if doc.Worker != nil {
		r, err := workerRunSpec(doc.Worker, options)
		return r, onWorker(worker.Bootstrap), err
	}
	cluster := doc.Cluster
	if doc.Join != nil {
		cluster = &doc.Join.ClusterConfiguration
	}
	if err := config.CheckPatchesDir(cluster, o.configPath, ""); err != nil {
		return runSpec{}, nil, err
	}
	// A control-plane node renews, at each boot, what is due (within
	// certificates.renewBefore of its end) or wrong, and restarts what
	// uses it: an unattended node has nobody to run `certs renew`.
	options.Renew = true
	if doc.Join != nil {
		return runSpec{config: cluster, join: &doc.Join.Join, options: options}, onControlPlaneJoin(joinControlPlane), nil
	}
	return runSpec{config: cluster, options: options}, onInit(initNode), nil
}

// joinControlPlane joins the control-plane node, or converges one that has
// joined: the join changes nothing then, and its download-certs is skipped
// once the cluster CA's key is on the node, after the kubeadm-certs Secret
// may have expired.
func joinControlPlane(ctx context.Context, n *controlplane.JoinNode) ([]string, error) {
	ran, err := controlplane.JoinWorkflow.Run(ctx, n, nil)
	if err != nil {
		return ran, err
	}
	return ran, controlplane.RestartRenewed(ctx, n.Node)
}

// initNode inits the cluster, or, when a restore on another control-plane
// node has replaced the cluster whose etcd data this node holds
// (controlplane.LeftCluster), joins the restored one with the files on the
// node. An unattended node's output goes to its journal, so the join
// command, which holds a bootstrap token, is left out of the result.
func initNode(ctx context.Context, n *phases.Node) ([]string, error) {
	left, err := controlplane.LeftCluster(ctx, n)
	if err != nil {
		return nil, err
	}
	if left {
		return joinControlPlane(ctx, &controlplane.JoinNode{Node: n, Join: &config.Join{}})
	}
	ran, err := phases.InitWorkflow.Run(ctx, n, nil)
	n.JoinCommand = ""
	if err != nil {
		return ran, err
	}
	return ran, controlplane.RestartRenewed(ctx, n)
}

// run runs the node's workflow until it succeeds, an attempt fails in a
// way no retry fixes, or ctx ends (bootstrap.Retry). Each attempt loads
// the configuration again, so a fixed file is taken up, and reports like
// any run: with -o json, each ends with its result.
func (o *bootstrapOptions) run(ctx context.Context, stdout, stderr io.Writer) error {
	if o.retry <= 0 {
		return &exit.UsageError{Msg: fmt.Sprintf("--retry-interval %s: want a positive duration, like 10s", o.retry)}
	}
	var do steps
	load := func() (runSpec, error) {
		r, steps, err := o.spec()
		do = steps
		return r, err
	}
	run := func(ctx context.Context, r runSpec, run *workflow.Run) ([]string, resultOf, error) {
		return do(ctx, r, run)
	}
	report := reporter(o.output, stdout, stderr)
	if err := o.fetchNodeFile(ctx, report); err != nil {
		return err
	}
	return bootstrap.Retry(ctx, o.retry, func(ctx context.Context) error {
		return o.deps.execute(ctx, o.output, stdout, stderr, load, run)
	}, func(n int, err error) {
		report.Warnf("attempt %d failed (exit code %d): %v; retrying in %s", n, exit.Code(err), err, o.retry)
	})
}

// fetchNodeFile fetches the node's file into --config's path when that
// holds none, from --config-url or the kernel command line (see package
// nodefile), retrying until it is served; nothing unverified is written.
// With neither, it leaves the missing file to the configuration's load.
func (o *bootstrapOptions) fetchNodeFile(ctx context.Context, report *output.Reporter) error {
	if o.configPath == "" {
		return nil
	}
	if _, err := os.Stat(o.configPath); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	src := o.source
	if src.URL != "" || src.CAHash != "" {
		if err := src.Check(); err != nil {
			return err
		}
	} else {
		cmdline, err := os.ReadFile(o.kernelCmdline)
		if err != nil {
			return fmt.Errorf("%s holds no file, and the kernel command line cannot be read: %w", o.configPath, err)
		}
		var found bool
		if src, found, err = nodefile.FromCmdline(string(cmdline)); err != nil {
			return err
		}
		if !found {
			return &exit.UsageError{Msg: fmt.Sprintf("%s holds no file, and neither --config-url nor the kernel command line (%s) names where to fetch it: "+
				"place the node's file there (`kubeboot config fleet` writes it), or boot with %s=<url> %s=<the fleet's config-ca-hash>", o.configPath, o.kernelCmdline, nodefile.URLParam, nodefile.CAHashParam)}
		}
	}
	machine, err := nodefile.DetectMachine()
	if err != nil {
		return err
	}
	report.Infof("%s holds no file: fetching this machine's (host name %s, MAC %s) from %s", o.configPath, machine.Hostname, machine.MAC, config.RedactedURL(src.Expand(machine)))
	data, err := nodefile.Fetch(ctx, src, machine, func(err error, next time.Duration) {
		report.Warnf("%v; retrying in %s", err, next)
	})
	if err != nil {
		return err
	}
	if err := nodefile.Write(o.configPath, data); err != nil {
		return err
	}
	report.Infof("wrote %s (%d bytes): signed by the fleet's config CA %s, and this machine's", o.configPath, len(data), src.CAHash)
	return nil
}

func newBootstrapCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	opts := &bootstrapOptions{deps: d}
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Bring this node up unattended from its configuration: init for a ClusterConfiguration, join --control-plane for a JoinConfiguration, join for a WorkerConfiguration, retried until it converges",
		Example: examples(
			"kubeboot bootstrap --config /etc/kubeboot/node.yaml -o json",
			"kubeboot bootstrap --config node.yaml --retry-interval 30s",
		),
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return opts.run(cmd.Context(), stdout, stderr)
		},
	}
	flags := cmd.Flags()
	addConfigFlag(flags, &opts.configPath)
	addOutputFlag(flags, &opts.output)
	opts.preflight.add(flags)
	flags.DurationVar(&opts.retry, "retry-interval", 10*time.Second, "how long to wait after a failed attempt before the next")
	flags.StringVar(&opts.source.URL, "config-url", "", "when --config's file is missing: fetch it from this https URL ({mac} and {hostname} stand for this machine's), as `kubeboot config serve` serves it (default: the kernel command line's kubeboot.config=)")
	flags.StringVar(&opts.source.CAHash, "config-ca-hash", "", "with --config-url: the fleet's config CA's pin, sha256:<hex> (config fleet's config-ca-hash), that the server's certificate and the file's signature must chain to (default: the kernel command line's kubeboot.config-ca-hash=)")
	flags.StringVar(&opts.kernelCmdline, "kernel-cmdline", "/proc/cmdline", "where the kernel command line is read, for kubeboot.config= and kubeboot.config-ca-hash=")
	cmd.AddCommand(&cobra.Command{
		Use:     "unit",
		Short:   "Print the systemd unit that runs bootstrap at boot from " + bootstrap.ConfigPath,
		Example: examples("kubeboot bootstrap unit > /etc/systemd/system/kubeboot-bootstrap.service"),
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprint(stdout, bootstrap.Unit)
			return err
		},
	})
	return cmd
}
