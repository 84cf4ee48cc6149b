package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/cri"
	"github.com/kubeboot/kubeboot/exit"
	"github.com/kubeboot/kubeboot/join"
	"github.com/kubeboot/kubeboot/lab"
	"github.com/kubeboot/kubeboot/output"
	"github.com/kubeboot/kubeboot/phases"
)

// labOptions are the flags of `kubeboot lab` and its subcommands.
type labOptions struct {
	configPath   string
	clusterPath  string
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
	cmd := groupCommand("lab", "Run a real control plane on this machine on containerd and runc, under the real kubelet")
	cmd.Long = "lab runs a node's own containerd (with runc) and the real kubelet, which then runs the static pods\n" +
		"in real containers. The images are built from the binaries in --bin-dir under the references kubeboot\n" +
		"renders and imported into the node's containerd; no registry is needed. Every path comes from the config\n" +
		"(see examples/lab.yaml); the lab's own files (containerd's root and state, the kubelet's root dir, pid\n" +
		"files, logs) live in <kubeconfigDir>/lab, which `lab down` removes. The config's kubelet.extraConfig\n" +
		"must let the kubelet start on such a machine: failSwapOn: false, failCgroupV1: false,\n" +
		"cgroupsPerQOS: false, enforceNodeAllocatable: []."
	addConfigFlag(cmd.PersistentFlags(), &opts.configPath)
	cmd.PersistentFlags().StringVar(&opts.clusterPath, "cluster", "", "a lab description (see examples/cluster.yaml): several nodes, each in its own network namespace on the lab's bridge; instead of --config")
	cmd.PersistentFlags().StringVar(&opts.binDir, "bin-dir", envOr("KUBEBOOT_BIN_DIR", "test/tools/bin"), "directory of containerd, the kubelet, etcd and the Kubernetes binaries ($KUBEBOOT_BIN_DIR)")

	up := &cobra.Command{
		Use:   "up",
		Short: "Start containerd with the lab's images and the kubelet, then run kubeboot init (or, with --control-plane, kubeboot join --control-plane)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.clusterPath != "" {
				return opts.clusterUp(cmd.Context(), stdout, stderr)
			}
			if opts.configPath == "" {
				return &exit.UsageError{Msg: "lab up needs --config (one node, like examples/lab.yaml) or --cluster (a lab description, like examples/cluster.yaml)"}
			}
			return execute(cmd.Context(), opts.output, stdout, stderr, opts.spec, func(ctx context.Context, s *phases.State) ([]string, error) {
				// The kubelet needs its config and kubeconfig, so the
				// phases that write them run before it starts.
				prep := []phases.Phase{phases.Certs, phases.Kubeconfig, phases.KubeletConfig}
				workflow := phases.Init
				if opts.controlPlane {
					prep, workflow = join.Prepare, join.ControlPlane
				}
				return labUp(ctx, s, opts.binDir, prep, workflow)
			})
		},
	}
	addOutputFlag(up.Flags(), &opts.output)
	addControlPlaneFlag(up.Flags(), &opts.controlPlane)
	opts.bundle.add(up)
	down := &cobra.Command{
		Use:   "down",
		Short: "Stop the kubelet, remove every pod, stop containerd and remove the lab's own files",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.clusterPath != "" {
				c, err := lab.LoadCluster(opts.clusterPath)
				if err != nil {
					return &exit.UsageError{Msg: err.Error()}
				}
				return clusterDown(contextOf(cmd), c, output.NewReporter(stderr, false))
			}
			if opts.configPath == "" {
				return &exit.UsageError{Msg: "lab down needs --config or --cluster: what the lab was brought up with"}
			}
			cfg, err := loadNode(opts.configPath)
			if err != nil {
				return err
			}
			report := output.NewReporter(stderr, false)
			report.SetPhase("lab")
			return labNode(cfg, opts.binDir).Down(contextOf(cmd), report.Infof)
		},
	}
	var files int
	supervise := &cobra.Command{
		Use:    "supervise [--files N] -- BINARY [ARG...]",
		Short:  "Run a lab daemon and restart it when it exits (started by lab up)",
		Hidden: true,
		Args:   usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(contextOf(cmd), os.Interrupt, syscall.SIGTERM)
			defer stop()
			extra := make([]*os.File, files)
			for i := range extra {
				extra[i] = os.NewFile(uintptr(3+i), "inherited")
			}
			return lab.Supervise(ctx, stderr, time.Second, extra, args[0], args[1:]...)
		},
	}
	supervise.Flags().IntVar(&files, "files", 0, "how many inherited files, from fd 3 on, to pass on to the daemon")
	cmd.AddCommand(up, down, supervise)
	return cmd
}

// clusterUp runs `lab up --cluster`: a usage error for a bad description,
// then the cluster's bring-up, under SIGINT and SIGTERM.
func (o *labOptions) clusterUp(ctx context.Context, stdout, stderr io.Writer) error {
	c, err := lab.LoadCluster(o.clusterPath)
	if err != nil {
		return &exit.UsageError{Msg: err.Error()}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	report := output.NewReporter(stderr, false)
	if o.output.json() {
		report = output.NewReporter(stdout, true)
	}
	res, err := clusterUp(ctx, c, o.binDir, report)
	report.PrintResult(res)
	return err
}

// contextOf is a command's context, or the background when it has none.
func contextOf(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// labNode is the lab's runtime for the node of cfg: its files in
// <kubeconfigDir>/lab, containerd serving the kubelet's runtime endpoint.
func labNode(cfg *config.ClusterConfiguration, binDir string) lab.Node {
	return lab.Node{
		Dir:    filepath.Join(cfg.Paths.KubeconfigDir, "lab"),
		Socket: strings.TrimPrefix(cfg.Kubelet.ContainerRuntimeEndpoint, "unix://"),
		BinDir: binDir,
	}
}

// labUp starts the node's containerd with the images the node needs,
// writes what the kubelet needs, starts the kubelet, and runs every phase
// of workflow but kubelet-start; the wait phase then sees the kubelet bring
// the control plane up.
// If it fails before init runs, it tears down what it started; after that
// the lab stays up for a look at its logs.
func labUp(ctx context.Context, s *phases.State, binDir string, prep []phases.Phase, workflow phases.Runner) (ran []string, err error) {
	cfg := s.Config
	if binDir, err = filepath.Abs(binDir); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the kubeboot binary: %w", err)
	}
	node := labNode(cfg, binDir)
	node.Supervisor = []string{self, "lab", "supervise"}
	// The kubelet's files stay in the lab's dir, its certificates too, and
	// kubelet-finalize looks for them there.
	cfg.Kubelet.CertDir = filepath.Join(node.Dir, "kubelet", "pki")
	initStarted := false
	defer func() {
		if err != nil && !initStarted {
			_ = node.Down(context.WithoutCancel(ctx), func(string, ...any) {})
		}
	}()
	s.Report.SetPhase("lab")
	images, pulls, err := labImages(s, binDir)
	if err != nil {
		return nil, err
	}
	archive, err := lab.Archive(filepath.Join(binDir, ".lab-images"), images)
	if err != nil {
		return nil, err
	}
	if err := node.StartContainerd(ctx); err != nil {
		return nil, err
	}
	s.Report.Infof("containerd serving the CRI on %s (log: %s)", node.Socket, node.Containerd().LogFile())
	if err := lab.Import(ctx, filepath.Join(binDir, "ctr"), node.Socket, archive, images); err != nil {
		return nil, err
	}
	s.Report.Infof("imported %d images built from %s", len(images), binDir)
	if err := pullLabImages(ctx, node, binDir, pulls, s.Report); err != nil {
		return nil, err
	}
	if _, err := (phases.Runner{Phases: prep}).Run(ctx, s, nil); err != nil {
		return nil, err
	}
	s.Report.SetPhase("lab")
	kubelet := node.Kubelet()
	err = kubelet.Start(filepath.Join(binDir, "kubelet"), append(phases.KubeletArgs(cfg), "--root-dir="+filepath.Join(node.Dir, "kubelet"))...)
	if err != nil {
		return nil, err
	}
	s.Report.Infof("kubelet started (log: %s)", kubelet.LogFile())
	initStarted = true
	// The lab runs its kubelet itself, so systemd must not.
	if ran, err = workflow.Run(ctx, s, []string{phases.KubeletStart.Name}); err != nil {
		return ran, fmt.Errorf("%w\n(logs: %s, %s; stop the lab with `kubeboot lab down`)", err, kubelet.LogFile(), node.Containerd().LogFile())
	}
	s.Report.SetPhase("lab")
	s.Report.Infof("control plane is up: kubectl --kubeconfig %s get pods -n kube-system", cfg.KubeconfigPath(config.KubeconfigAdmin))
	return ran, nil
}

// labImages are the images the lab node needs: its static pods' images and
// kube-proxy's for every Kubernetes release in the bin dir (the bin dir's
// own and each v<major>.<minor>/ set), so that an upgrade to another
// release finds its images as a pull would; the sandbox image, CoreDNS and
// agnhost. Those whose binary the bin dir lacks are to be pulled, as any
// node would pull them.
func labImages(s *phases.State, binDir string) (build []lab.Image, pull []string, err error) {
	sets, err := filepath.Glob(filepath.Join(binDir, "v*", "kube-apiserver"))
	if err != nil {
		return nil, nil, err
	}
	refs := []string{lab.SandboxImage, lab.CoreDNSImage, lab.AgnhostImage}
	for _, apiserver := range append([]string{filepath.Join(binDir, "kube-apiserver")}, sets...) {
		version, err := kubernetesVersion(apiserver)
		if err != nil {
			return nil, nil, err
		}
		release := *s.Config
		release.KubernetesVersion = version
		state := *s
		state.Config = &release
		images, err := phases.Images(&state)
		if err != nil {
			return nil, nil, err
		}
		images = append(images, release.ImageRepository+"/kube-proxy:"+version)
		for _, ref := range images {
			if !slices.Contains(refs, ref) {
				refs = append(refs, ref)
			}
		}
	}
	for _, ref := range refs {
		img, err := lab.ResolveImage(binDir, ref)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			pull = append(pull, ref)
		case err != nil:
			return nil, nil, err
		default:
			build = append(build, img)
		}
	}
	return build, pull, nil
}

// pullLabImages makes the node's containerd pull the images the lab cannot
// build, through the CRI as the kubelet would.
func pullLabImages(ctx context.Context, node lab.Node, binDir string, refs []string, report *output.Reporter) error {
	if len(refs) == 0 {
		return nil
	}
	client, err := cri.Dial("unix://"+node.Socket, func(p string) string { return p })
	if err != nil {
		return err
	}
	defer func() { _ = client.Close() }()
	for _, ref := range refs {
		if _, err := client.Pull(ctx, ref); err != nil {
			return fmt.Errorf("%w (%s has no binary to build it from: run `make lab-binaries`)", err, binDir)
		}
		report.Infof("pulled %s", ref)
	}
	return nil
}

// kubernetesVersion asks a Kubernetes binary for its version:
// "Kubernetes v1.36.3" -> "v1.36.3".
func kubernetesVersion(binary string) (string, error) {
	out, err := exec.Command(binary, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("ask %s for its version: %w", binary, err)
	}
	fields := strings.Fields(string(out))
	if len(fields) != 2 {
		return "", fmt.Errorf("ask %s for its version: it answered %q, want \"Kubernetes vX.Y.Z\"", binary, out)
	}
	return fields[1], nil
}
