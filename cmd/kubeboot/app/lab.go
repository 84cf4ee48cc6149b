package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/day2"
	"github.com/kubeboot/kubeboot/exit"
	"github.com/kubeboot/kubeboot/join"
	"github.com/kubeboot/kubeboot/lab"
	"github.com/kubeboot/kubeboot/nodelock"
	"github.com/kubeboot/kubeboot/output"
	"github.com/kubeboot/kubeboot/phases"
)

// labOptions are the flags of `kubeboot lab` and its subcommands.
type labOptions struct {
	deps         deps
	configPath   string
	clusterPath  string
	binDir       string
	output       outputFormat
	controlPlane bool
	bundle       bundleFlags
	// kubeadmJoin is a discovery file: the worker joins with the real
	// kubeadm instead of kubeboot join.
	kubeadmJoin string
	// kubeadmInit is a kubeadm configuration file: the node inits the
	// cluster with the real kubeadm instead of kubeboot init.
	kubeadmInit string
	// startAfter is a file whose existence starts the node's bring-up once
	// its images are in: lab up --cluster starts its workers' joins at once.
	startAfter string
}

// spec loads the lab node's configuration: a ClusterConfiguration, a
// WorkerConfiguration, or with --control-plane a JoinConfiguration and the
// bundle. The node is one of several on this machine, so its lock is its
// own (nodelock.Path), not the machine's.
func (o *labOptions) spec() (runSpec, error) {
	r, err := o.nodeSpec()
	if err == nil {
		r.lockPath = nodelock.Path(r.kubeconfigDir())
	}
	return r, err
}

// kubeconfigDir is the kubeconfig dir of the node r configures, which
// holds a lab node's own files.
func (r runSpec) kubeconfigDir() string {
	if r.worker != nil {
		return r.worker.Paths.KubeconfigDir
	}
	return r.config.Paths.KubeconfigDir
}

// labNode is the lab's runtime for the node r configures (see labNode).
func (r runSpec) labNode(binDir string) lab.Node {
	if r.worker != nil {
		return labNode(r.worker.Paths.KubeconfigDir, r.worker.Kubelet.ContainerRuntimeEndpoint, binDir)
	}
	return labNode(r.config.Paths.KubeconfigDir, r.config.Kubelet.ContainerRuntimeEndpoint, binDir)
}

// withLabCertDir is r with the kubelet's certificate dir of a
// control-plane node in the lab's dir, where the lab's kubelet keeps it
// (--cert-dir) and kubelet-finalize looks for it: part of loading a lab
// node's configuration, which the run then leaves as it is.
func withLabCertDir(r runSpec, err error) (runSpec, error) {
	if err == nil && r.config != nil {
		r.config.Kubelet.CertDir = filepath.Join(r.config.Paths.KubeconfigDir, "lab", "kubelet", "pki")
	}
	return r, err
}

// nodeSpec loads the lab node's configuration of whichever kind.
func (o *labOptions) nodeSpec() (runSpec, error) {
	ignored, err := labIgnoredChecks()
	if err != nil {
		return runSpec{}, err
	}
	if o.controlPlane {
		joining := joinOptions{deps: o.deps, configPath: o.configPath, controlPlane: true, bundle: o.bundle, preflight: preflightFlags{ignoreErrors: ignored}}
		return withLabCertDir(joining.spec())
	}
	env := o.deps.configEnv(config.KindClusterConfiguration, config.KindWorkerConfiguration)
	env.Worker = &config.WorkerFlags{} // the lab's worker joins as its file says
	doc, err := config.Load(o.configPath, env)
	if err != nil {
		return runSpec{}, err
	}
	if doc.Worker != nil {
		return workerRunSpec(doc.Worker, phases.Options{IgnorePreflightErrors: preflightFlags{ignoreErrors: ignored}.ignored()})
	}
	if err := o.checkKubeProxyContained(doc.Cluster); err != nil {
		return runSpec{}, err
	}
	r := runSpec{config: doc.Cluster, options: phases.Options{IgnorePreflightErrors: preflightFlags{ignoreErrors: ignored}.ignored()}}
	return withLabCertDir(r, config.CheckPatchesDir(doc.Cluster, o.configPath, ""))
}

// labIgnoredChecks are the host checks of kubeboot's preflight that a lab
// node cannot pass and need not: its kubelet runs from --bin-dir, not from
// the PATH; and a node in the host's network namespace (not one of `lab up
// --cluster`'s, which forward as a node does) runs only host-network pods,
// so it needs no forwarding, which the lab never turns on in the host's.
func labIgnoredChecks() ([]string, error) {
	ignored := []string{"FileExisting-kubelet"}
	contained, err := lab.InNamedNetworkNamespace()
	if err != nil || contained {
		return ignored, err
	}
	return append(ignored, "FileContent--proc-sys-net-ipv4-ip_forward", "FileContent--proc-sys-net-ipv6-conf-default-forwarding"), nil
}

// checkKubeProxyContained refuses kube-proxy on a lab node that is not in
// a network namespace of its own (one of `lab up --cluster`'s): it would
// program the host's nftables or iptables.
func (o *labOptions) checkKubeProxyContained(cfg *config.ClusterConfiguration) error {
	if cfg.Addons.KubeProxy.Disabled {
		return nil
	}
	contained, err := lab.InNamedNetworkNamespace()
	if err != nil || contained {
		return err
	}
	return &exit.UsageError{Msg: o.configPath + ": addons.kubeProxy.disabled: a lab node in the host's network namespace must leave kube-proxy out, " +
		"which would program this host's packet filter: set addons.kubeProxy.disabled: true (and addons.coreDNS.disabled: true, since CoreDNS " +
		"reaches the API through a Service), as examples/lab.yaml does, or run the node in a namespace of its own with `lab up --cluster`"}
}

func newLabCommand(d deps, stdout, stderr io.Writer) *cobra.Command {
	opts := &labOptions{deps: d}
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
			return d.execute(cmd.Context(), opts.output, stdout, stderr, opts.spec, opts.up)
		},
	}
	addOutputFlag(up.Flags(), &opts.output)
	addControlPlaneFlag(up.Flags(), &opts.controlPlane)
	opts.bundle.add(up)
	up.Flags().StringVar(&opts.kubeadmJoin, "kubeadm-join", "", "join this worker with the real kubeadm (from --bin-dir) and this discovery file, in the mount namespace `lab up --cluster` gives the node")
	up.Flags().StringVar(&opts.startAfter, "start-after", "", "once the node's images are in containerd, wait until this file exists before bringing the node up (`lab up --cluster` joins its workers at once with it)")
	up.Flags().StringVar(&opts.kubeadmInit, "kubeadm-init", "", "init the cluster on this node with the real kubeadm (from --bin-dir) and this kubeadm configuration, in the mount namespace `lab up --cluster` gives the node")
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
				if c.Machines {
					l, err := machineLab(opts.clusterPath, opts.binDir)
					if err != nil {
						return err
					}
					return l.Down(cmd.Context())
				}
				return clusterDown(cmd.Context(), c, output.NewReporter(stderr, false))
			}
			if opts.configPath == "" {
				return &exit.UsageError{Msg: "lab down needs --config or --cluster: what the lab was brought up with"}
			}
			doc, err := d.load(opts.configPath)
			if err != nil {
				return err
			}
			if doc.Worker != nil {
				report := output.NewReporter(stderr, false)
				report.SetPhase("lab")
				return runSpec{worker: doc.Worker}.labNode(opts.binDir).Down(cmd.Context(), report.Infof)
			}
			// No node lock: lab down must stop a lab whose lab up hangs.
			r := runSpec{config: doc.ControlPlane()}
			s, err := d.node(r, output.NewReporter(stderr, false), stdout)
			if err != nil {
				return err
			}
			return labDown(cmd.Context(), s, r.labNode(opts.binDir))
		},
	}
	var files int
	supervise := &cobra.Command{
		Use:    "supervise [--files N] -- BINARY [ARG...]",
		Short:  "Run a lab daemon and restart it when it exits (started by lab up)",
		Hidden: true,
		Args:   usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			extra := make([]*os.File, files)
			for i := range extra {
				extra[i] = os.NewFile(uintptr(3+i), "inherited")
			}
			return lab.Supervise(cmd.Context(), stderr, time.Second, extra, args[0], args[1:]...)
		},
	}
	supervise.Flags().IntVar(&files, "files", 0, "how many inherited files, from fd 3 on, to pass on to the daemon")
	cmd.AddCommand(up, down, supervise, newLabRebootCommand(opts), newLabExecCommand(opts, stdout, stderr))
	return cmd
}

// up is lab up's steps: the node's role (init, join --control-plane, a
// worker's join, or the real kubeadm's), brought up by labUp.
func (o *labOptions) up(ctx context.Context, r runSpec, run *phases.Run, found *phases.Result) ([]string, error) {
	// Before the role reads the node's facts (its etcd
	// membership), which an earlier lab's files would give.
	if err := removeEarlierLab(ctx, r, run, o.binDir); err != nil {
		return nil, err
	}
	role, err := labRoleOf(r, run, found)
	switch {
	case err != nil:
		return nil, err
	case o.kubeadmJoin != "" && r.worker == nil:
		return nil, &exit.UsageError{Msg: "--kubeadm-join joins a worker: --config must be a WorkerConfiguration"}
	case o.kubeadmJoin != "":
		role = kubeadmRole(run, r.worker, o.binDir, o.kubeadmJoin)
	case o.kubeadmInit != "" && (r.worker != nil || r.join != nil):
		return nil, &exit.UsageError{Msg: "--kubeadm-init inits a cluster: --config must be a ClusterConfiguration, without --control-plane"}
	case o.kubeadmInit != "":
		role = kubeadmInitRole(run, r.config, o.binDir, o.kubeadmInit)
	}
	role.startAfter = o.startAfter
	return labUp(ctx, r, run, o.binDir, role)
}

// clusterUp runs `lab up --cluster`: a usage error for a bad description,
// then the cluster's bring-up, until ctx ends (at SIGINT or SIGTERM).
func (o *labOptions) clusterUp(ctx context.Context, stdout, stderr io.Writer) error {
	c, err := lab.LoadCluster(o.clusterPath)
	if err != nil {
		return &exit.UsageError{Msg: err.Error()}
	}
	report := output.NewReporter(stderr, false)
	if o.output.json() {
		report = output.NewReporter(stdout, true)
	}
	if c.Machines {
		l, err := machineLab(o.clusterPath, o.binDir)
		if err != nil {
			return err
		}
		return machinesUp(ctx, l, report)
	}
	res, err := o.deps.clusterUp(ctx, c, o.binDir, report)
	report.PrintResult(res)
	return err
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// labDown tears a control-plane lab node down and then removes what init
// or join wrote for it, as `kubeboot reset --force` does: a lab is
// disposable, and one brought down leaves nothing a new lab up would
// misread (such as a kubelet.conf naming the certificate the kubelet kept
// in the lab's dir, which went with it).
// Only a node whose lab dir is there ran a lab: another's files stay.
func labDown(ctx context.Context, s *phases.Node, node lab.Node) error {
	s.Report.SetPhase("lab")
	_, err := os.Stat(node.Dir)
	ranLab := err == nil
	if err := node.Down(ctx, s.Report.Infof); err != nil {
		return err
	}
	if !ranLab {
		s.Report.Infof("%s is not there: no lab ran on this node, so nothing of init's is removed", node.Dir)
		return nil
	}
	if err := day2.Reset(day2.ResetOptions{Force: true}).Run(ctx, s); err != nil {
		return err
	}
	return removeLabLeftovers(s)
}

// removeLabLeftovers removes what reset leaves to a node's kubelet and
// logs, which on a lab node are the lab's own: the manifest dir, the audit
// logs, the etcd snapshots, the pods' logs, the volume plugins and the
// kubelet's config dir,
// each only when it lies in the node's kubeconfig dir, and then that dir
// once it is empty.
func removeLabLeftovers(s *phases.Node) error {
	c := s.Config
	dir := filepath.Clean(c.Paths.KubeconfigDir)
	leftovers := []string{c.Paths.ManifestsDir, c.Security.Audit.LogDir, filepath.Dir(c.Kubelet.ConfigFile)}
	if c.Etcd.Local != nil {
		leftovers = append(leftovers, c.Etcd.Local.SnapshotsDir)
	}
	for _, field := range []string{"podLogsDir", "volumePluginDir"} {
		if p, ok := c.Kubelet.ExtraConfig[field].(string); ok {
			leftovers = append(leftovers, p)
		}
	}
	for _, p := range leftovers {
		if rel, err := filepath.Rel(dir, filepath.Clean(p)); err != nil || rel == "." || strings.HasPrefix(rel, "..") || filepath.IsAbs(rel) {
			continue
		}
		if err := s.Files.RemoveAll(p); err != nil {
			return err
		}
	}
	if entries, err := os.ReadDir(s.Files.HostPath(dir)); err == nil && len(entries) == 0 {
		if err := s.Files.Remove(dir); err != nil {
			return err
		}
		s.Report.Infof("removed %s", dir)
	}
	return nil
}

// labNode is the lab's runtime for a node: its files in
// <kubeconfigDir>/lab, containerd serving the kubelet's runtime endpoint.
func labNode(kubeconfigDir, runtimeEndpoint, binDir string) lab.Node {
	return lab.Node{
		Dir:    filepath.Join(kubeconfigDir, "lab"),
		Socket: strings.TrimPrefix(runtimeEndpoint, "unix://"),
		BinDir: binDir,
	}
}

// labRole is how lab up brings up a node of one kind: what it sets up
// first, the phases that write what the kubelet reads at start, the
// kubelet's flags once those files are there, and the workflow that runs
// once it started, which returns the steps that ran.
type labRole struct {
	setup    func() error
	prep     func(ctx context.Context) error
	kubelet  func(ctx context.Context) ([]string, error)
	workflow func(ctx context.Context) ([]string, error)
	// startAfter, when set, is a file to wait for before the bring-up.
	startAfter string
	// watch, when set, is the control plane lab up watches come up (see
	// lab.WatchControlPlane), to mark the control-plane-healthy stage.
	watch *config.ClusterConfiguration
	// done is the last line of a successful lab up.
	done string
}

// labRoleOf is the role of the node r configures: the first control-plane
// node runs init, another control-plane node join --control-plane, and a
// worker kubeboot join, whose kubelet bootstraps its credentials with the
// token; each on the data of its workflow in run, a control-plane node's
// findings going into found. The kubelet keeps its root and certificate
// dirs in the lab's.
func labRoleOf(r runSpec, run *phases.Run, found *phases.Result) (labRole, error) {
	root := filepath.Join(r.kubeconfigDir(), "lab", "kubelet")
	if r.worker != nil {
		w := join.NewWorkerNode(run, r.worker)
		return labRole{
			prep: func(ctx context.Context) error {
				_, err := phases.Runner[*join.WorkerNode]{Phases: join.WorkerPrepare}.Run(ctx, w, nil)
				return err
			},
			kubelet: fixedArgs(append(join.KubeletArgs(r.worker), "--root-dir="+root, "--cert-dir="+filepath.Join(root, "pki"))),
			workflow: func(ctx context.Context) ([]string, error) {
				return phases.Runner[*join.WorkerNode]{Phases: []phases.Phase[*join.WorkerNode]{join.KubeletWaitBootstrap}}.Run(ctx, w, nil)
			},
			done: fmt.Sprintf("node %s joined and is Ready", r.worker.Node.Name),
		}, nil
	}
	n, err := r.node(run)
	if err != nil {
		return labRole{}, err
	}
	cfg := r.config
	// The lab runs its kubelet itself, so systemd must not.
	skip := []string{"kubelet-start"}
	role := labRole{
		prep: func(ctx context.Context) error {
			_, err := phases.Runner[*phases.Node]{Phases: []phases.Phase[*phases.Node]{phases.Certs, phases.Kubeconfig, phases.KubeletConfig}}.Run(ctx, n, nil)
			return err
		},
		kubelet: fixedArgs(append(phases.KubeletArgs(cfg), "--root-dir="+root)),
		workflow: func(ctx context.Context) ([]string, error) {
			defer found.Add(n)
			return phases.InitWorkflow.Run(ctx, n, skip)
		},
		watch: cfg,
		done:  "control plane is up: kubectl --kubeconfig " + cfg.KubeconfigPath(config.KubeconfigAdmin) + " get pods -n kube-system",
	}
	if r.join != nil {
		joining := &join.ControlPlaneNode{Node: n, Join: r.join, Secrets: r.secrets}
		role.prep = func(ctx context.Context) error {
			_, err := phases.Runner[*join.ControlPlaneNode]{Phases: join.Prepare}.Run(ctx, joining, nil)
			return err
		}
		role.workflow = func(ctx context.Context) ([]string, error) {
			defer found.Add(n)
			return join.ControlPlaneWorkflow.Run(ctx, joining, skip)
		}
	}
	return role, nil
}

// The stages of a node's bring-up that lab up marks in its JSON events
// (the "stage" field), in the order they come, so that make bench can time
// them whichever tool brings the node up.
const (
	// stageRuntimeStarted: containerd serves the CRI.
	stageRuntimeStarted = "runtime-started"
	// stageImagesReady: every image the node runs is in containerd.
	stageImagesReady = "images-ready"
	// stageBootstrapStarted: the tool (kubeboot's phases, or kubeadm) starts.
	stageBootstrapStarted = "bootstrap-started"
	// stageKubeletStarted: lab up started the kubelet, once the tool had
	// written what it reads.
	stageKubeletStarted = "kubelet-started"
	// stageManifestsSeen: lab up's watch of the control plane read all
	// four manifests. The watch starts with the kubelet, so for kubeadm,
	// which writes them before, it is the kubelet's start. Each component
	// is then marked "<name>-healthy" (stageHealthySuffix) as it first
	// answers.
	stageManifestsSeen = "manifests-seen"
	stageHealthySuffix = "-healthy"
	// stageControlPlaneHealthy: the node's four components answer healthy,
	// as lab up sees them (lab.WatchControlPlane).
	stageControlPlaneHealthy = "control-plane-healthy"
	// stageKubeadmExited: kubeadm init or join returned.
	stageKubeadmExited = "kubeadm-exited"
	// stageWorkflowDone: the role's workflow ended: kubeboot init or join
	// returned, or kubeadm's node is up.
	stageWorkflowDone = "workflow-done"
)

// waitForFile returns once the file at path exists (at once for no path).
func waitForFile(ctx context.Context, path string) error {
	if path == "" {
		return nil
	}
	err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		_, err := os.Stat(path)
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("wait for %s to start the bring-up: %w", path, err)
	}
	return nil
}

// watchControlPlane watches cfg's control plane come up in the
// background, if cfg is set, and marks the moment lab up's watch read the
// manifests, each component's first healthy answer, and the moment all
// four answer. The function it returns waits for the watch a little, for
// a tool that returned on its own view of health; a healthy control plane
// is seen within lab.WatchControlPlane's 20 ms.
func watchControlPlane(ctx context.Context, cfg *config.ClusterConfiguration, report *output.Reporter) func() {
	if cfg == nil {
		return func() {}
	}
	// The workflow runs meanwhile, in phases of its own: these are lab's.
	stage := func(stage, msg string) {
		report.Event(output.Event{Phase: "lab", Level: output.LevelInfo, Msg: msg, Fields: map[string]any{"stage": stage}})
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		seen := func(milestone string) {
			if milestone == lab.ManifestsSeen {
				stage(stageManifestsSeen, "lab up's watch read the four manifests")
				return
			}
			stage(milestone+stageHealthySuffix, milestone+" answers healthy")
		}
		if err := lab.WatchControlPlane(ctx, cfg, seen); err == nil {
			stage(stageControlPlaneHealthy, "all four components answer healthy")
		}
	}()
	return func() {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		cancel()
		<-done
	}
}

// fixedArgs are kubelet flags known before lab up starts.
func fixedArgs(args []string) func(context.Context) ([]string, error) {
	return func(context.Context) ([]string, error) { return args, nil }
}

// removeEarlierLab starts afresh on a control-plane node where an earlier
// lab up was interrupted or not brought down, as lab down would leave it.
func removeEarlierLab(ctx context.Context, r runSpec, s *phases.Run, binDir string) error {
	node := r.labNode(binDir)
	if _, err := os.Stat(node.Dir); err != nil || r.worker != nil {
		return nil
	}
	s.Report.SetPhase("lab")
	s.Report.Infof("%s is there: an earlier lab of this node was not brought down; removing it first", node.Dir)
	earlier, err := r.node(s)
	if err == nil {
		err = labDown(ctx, earlier, node)
	}
	if err != nil {
		return fmt.Errorf("remove the earlier lab: %w", err)
	}
	return nil
}

// labUp starts the node's containerd with the images the node needs,
// writes what the kubelet needs, starts the kubelet, and runs the role's
// workflow: on a control-plane node the wait phase then sees the kubelet
// bring the control plane up; on a worker the join waits for its TLS
// bootstrap. If it fails before the workflow runs, it tears down what it
// started; after that the lab stays up for a look at its logs.
func labUp(ctx context.Context, r runSpec, s *phases.Run, binDir string, role labRole) (ran []string, err error) {
	if binDir, err = filepath.Abs(binDir); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the kubeboot binary: %w", err)
	}
	node := r.labNode(binDir)
	node.Supervisor = []string{self, "lab", "supervise"}
	initStarted := false
	defer func() {
		if err != nil && !initStarted {
			_ = node.Down(context.WithoutCancel(ctx), func(string, ...any) {})
		}
	}()
	s.Report.SetPhase("lab")
	if role.setup != nil {
		if err := role.setup(); err != nil {
			return nil, err
		}
	}
	images, pulls, err := labImages(s, r.config, binDir, self)
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
	s.Report.Stagef(stageRuntimeStarted, "containerd serving the CRI on %s (log: %s)", node.Socket, node.Containerd().LogFile())
	if err := lab.Import(ctx, filepath.Join(binDir, "ctr"), node.Socket, archive, images); err != nil {
		return nil, err
	}
	s.Report.Infof("imported %d images built from %s", len(images), binDir)
	if err := pullLabImages(ctx, node, binDir, pulls, s.Report); err != nil {
		return nil, err
	}
	s.Report.Stagef(stageImagesReady, "the node's images are in containerd")
	if err := waitForFile(ctx, role.startAfter); err != nil {
		return nil, err
	}
	s.Report.Stagef(stageBootstrapStarted, "bringing the node up")
	if role.prep != nil {
		if err := role.prep(ctx); err != nil {
			return nil, err
		}
	}
	s.Report.SetPhase("lab")
	args, err := role.kubelet(ctx)
	if err != nil {
		return nil, err
	}
	kubelet := node.Kubelet()
	if err := kubelet.Start(filepath.Join(binDir, "kubelet"), args...); err != nil {
		return nil, err
	}
	s.Report.Stagef(stageKubeletStarted, "kubelet started (log: %s)", kubelet.LogFile())
	initStarted = true
	watched := watchControlPlane(ctx, role.watch, s.Report)
	if ran, err = role.workflow(ctx); err != nil {
		return ran, fmt.Errorf("%w\n(logs: %s, %s; stop the lab with `kubeboot lab down`)", err, kubelet.LogFile(), node.Containerd().LogFile())
	}
	s.Report.SetPhase("lab")
	s.Report.Stagef(stageWorkflowDone, "%s", strings.Join(ran, ", "))
	watched()
	s.Report.Infof("%s", role.done)
	return ran, nil
}
