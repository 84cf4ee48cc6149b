package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/exit"
	"github.com/kubeboot/kubeboot/join"
	"github.com/kubeboot/kubeboot/lab"
	"github.com/kubeboot/kubeboot/output"
	"github.com/kubeboot/kubeboot/phases"
)

// labOptions are the flags of `kubeboot lab` and its subcommands.
type labOptions struct {
	configPath   string
	binDir       string
	output       outputFormat
	controlPlane bool
	bundle       bundleFlags
}

// spec loads the lab node's configuration: a ClusterConfiguration, or with
// --control-plane a JoinConfiguration and the bundle.
func (o *labOptions) spec() (runSpec, error) {
	if !o.controlPlane {
		cfg, err := loadCluster(o.configPath)
		if err != nil {
			return runSpec{}, err
		}
		return runSpec{config: cfg}, config.CheckPatchesDir(cfg, o.configPath, "")
	}
	joining := joinOptions{configPath: o.configPath, controlPlane: true, bundle: o.bundle}
	return joining.spec()
}

func newLabCommand(stdout, stderr io.Writer) *cobra.Command {
	opts := &labOptions{}
	cmd := groupCommand("lab", "Run a real control plane on this machine under the real kubelet, without a container runtime")
	cmd.Long = "lab runs kubeboot's process-backed CRI runtime and the real kubelet, which then runs the static pods\n" +
		"as plain processes. Every path comes from the config (see examples/lab.yaml); the lab's own files\n" +
		"(pid files, logs, the kubelet's root dir) live in <kubeconfigDir>/lab. The config's kubelet.extraConfig\n" +
		"must let the kubelet start on such a machine: failSwapOn: false, failCgroupV1: false,\n" +
		"cgroupsPerQOS: false, enforceNodeAllocatable: []."
	addConfigFlag(cmd.PersistentFlags(), &opts.configPath)
	cmd.PersistentFlags().StringVar(&opts.binDir, "bin-dir", envOr("KUBEBOOT_BIN_DIR", "test/tools/bin"), "directory of the kubelet, etcd and Kubernetes binaries ($KUBEBOOT_BIN_DIR)")

	up := &cobra.Command{
		Use:   "up",
		Short: "Start the CRI runtime and the kubelet, then run kubeboot init (or, with --control-plane, kubeboot join --control-plane)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.configPath == "" {
				return &exit.UsageError{Msg: "lab up needs --config: a config with every path under one lab directory, like examples/lab.yaml"}
			}
			configPath, err := filepath.Abs(opts.configPath)
			if err != nil {
				return err
			}
			return execute(cmd.Context(), opts.output, stdout, stderr, opts.spec, func(ctx context.Context, s *phases.State) ([]string, error) {
				// The kubelet needs its config and kubeconfig, so the
				// phases that write them run before it starts.
				prep := []phases.Phase{phases.Certs, phases.Kubeconfig, phases.KubeletConfig}
				workflow := phases.Init
				if opts.controlPlane {
					prep, workflow = join.Prepare, join.ControlPlane
				}
				return labUp(ctx, s, configPath, opts.binDir, prep, workflow)
			})
		},
	}
	addOutputFlag(up.Flags(), &opts.output)
	addControlPlaneFlag(up.Flags(), &opts.controlPlane)
	opts.bundle.add(up)
	down := &cobra.Command{
		Use:   "down",
		Short: "Stop the kubelet, every container and the CRI runtime",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.configPath == "" {
				return &exit.UsageError{Msg: "lab down needs --config: the config the lab was brought up with"}
			}
			cfg, err := loadNode(opts.configPath)
			if err != nil {
				return err
			}
			return labDown(cmd.Context(), cfg, output.NewReporter(stderr, false))
		},
	}
	runtime := &cobra.Command{
		Use:    "runtime",
		Short:  "Serve the process-backed CRI runtime (started by lab up)",
		Hidden: true,
		Args:   usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadNode(opts.configPath)
			if err != nil {
				return err
			}
			return serveRuntime(cmd.Context(), cfg, opts.binDir, stderr)
		},
	}
	cmd.AddCommand(up, down, runtime)
	return cmd
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// labDir holds the lab's pid files, logs and the kubelet's root dir.
func labDir(cfg *config.ClusterConfiguration) string {
	return filepath.Join(cfg.Paths.KubeconfigDir, "lab")
}

func socketPath(cfg *config.ClusterConfiguration) string {
	return strings.TrimPrefix(cfg.Kubelet.ContainerRuntimeEndpoint, "unix://")
}

// daemons are the lab's background processes, in stop order.
func daemons(cfg *config.ClusterConfiguration) (kubelet, runtime lab.Daemon) {
	return lab.Daemon{Name: "kubelet", Dir: labDir(cfg)}, lab.Daemon{Name: "runtime", Dir: labDir(cfg)}
}

// waitForSocket waits until something accepts connections on the socket.
func waitForSocket(ctx context.Context, path string, timeout time.Duration) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		conn, err := net.Dial("unix", path)
		if last = err; err != nil {
			return false, nil
		}
		return true, conn.Close()
	})
	if wait.Interrupted(err) && ctx.Err() == nil {
		return last
	}
	return err
}

// labUp starts the runtime, writes what the kubelet needs, starts the
// kubelet, and runs every init phase; the wait phase then sees the kubelet
// bring the control plane up. If it fails before init runs, it stops what it
// started; after that the lab stays up for a look at its logs.
func labUp(ctx context.Context, s *phases.State, configPath, binDir string, prep []phases.Phase, workflow phases.Runner) (ran []string, err error) {
	cfg := s.Config
	if binDir, err = filepath.Abs(binDir); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the kubeboot binary: %w", err)
	}
	kubelet, runtime := daemons(cfg)
	initStarted := false
	defer func() {
		if err != nil && !initStarted {
			_ = kubelet.Stop(10 * time.Second)
			_ = runtime.Stop(10 * time.Second)
		}
	}()
	s.Report.SetPhase("lab")
	if err := runtime.Start(self, "lab", "runtime", "--config", configPath, "--bin-dir", binDir); err != nil {
		return nil, err
	}
	if err := waitForSocket(ctx, socketPath(cfg), 10*time.Second); err != nil {
		return nil, fmt.Errorf("CRI runtime did not start (see %s): %w", runtime.LogFile(), err)
	}
	s.Report.Infof("CRI runtime serving on %s", socketPath(cfg))
	if _, err := (phases.Runner{Phases: prep}).Run(ctx, s, nil); err != nil {
		return nil, err
	}
	s.Report.SetPhase("lab")
	root := filepath.Join(labDir(cfg), "kubelet")
	err = kubelet.Start(filepath.Join(binDir, "kubelet"),
		"--config="+cfg.Kubelet.ConfigFile,
		"--kubeconfig="+cfg.KubeconfigPath(config.KubeconfigKubelet),
		"--hostname-override="+cfg.Node.Name,
		"--node-ip="+cfg.Node.AdvertiseAddress,
		"--root-dir="+root,
		"--cert-dir="+filepath.Join(root, "pki"))
	if err != nil {
		return nil, err
	}
	s.Report.Infof("kubelet started (log: %s)", kubelet.LogFile())
	initStarted = true
	if ran, err = workflow.Run(ctx, s, nil); err != nil {
		return ran, fmt.Errorf("%w\n(logs: %s, %s; stop the lab with `kubeboot lab down`)", err, kubelet.LogFile(), runtime.LogFile())
	}
	s.Report.SetPhase("lab")
	s.Report.Infof("control plane is up: kubectl --kubeconfig %s get pods -n kube-system", cfg.KubeconfigPath(config.KubeconfigAdmin))
	return ran, nil
}

// labDown stops the kubelet first, so it does not restart the pods, then
// the runtime daemon, then every container through a runtime on the same
// state, and finally undoes the kubelet's bind mount of its root dir.
func labDown(ctx context.Context, cfg *config.ClusterConfiguration, report *output.Reporter) error {
	report.SetPhase("lab")
	if ctx == nil {
		ctx = context.Background()
	}
	var errs []error
	kubelet, runtime := daemons(cfg)
	for _, d := range []lab.Daemon{kubelet, runtime} {
		if err := d.Stop(30 * time.Second); err != nil {
			errs = append(errs, err)
			continue
		}
		report.Infof("stopped %s", d.Name)
	}
	// Stopping containers needs their state, not the binaries.
	rt, err := lab.NewRuntime(lab.Options{StateDir: runtimeStateDir(cfg)})
	if err == nil {
		err = rt.StopAll(ctx)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("stop containers: %w", err))
	} else {
		report.Infof("stopped every container")
	}
	root := filepath.Join(labDir(cfg), "kubelet")
	if err := syscall.Unmount(root, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
		errs = append(errs, fmt.Errorf("unmount %s: %w", root, err))
	}
	return errors.Join(errs...)
}

func runtimeStateDir(cfg *config.ClusterConfiguration) string {
	return filepath.Join(labDir(cfg), "runtime")
}

// serveRuntime is the runtime daemon: it serves until SIGTERM.
func serveRuntime(ctx context.Context, cfg *config.ClusterConfiguration, binDir string, logs io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rt, err := lab.NewRuntime(lab.Options{BinDir: binDir, StateDir: runtimeStateDir(cfg), HostIP: cfg.Node.AdvertiseAddress, Logger: logs})
	if err != nil {
		return err
	}
	return rt.Serve(ctx, socketPath(cfg))
}
